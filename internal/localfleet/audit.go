package localfleet

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"
)

// AuditEvent is the part of a spoke's audit log entry (audit.k8s.io/v1
// Event, JSON lines) that tests, the demo and the benchmarks read.
type AuditEvent struct {
	Stage           string    `json:"stage"`
	Verb            string    `json:"verb"`
	RequestURI      string    `json:"requestURI"`
	UserAgent       string    `json:"userAgent"`
	RequestReceived time.Time `json:"requestReceivedTimestamp"`
	StageTimestamp  time.Time `json:"stageTimestamp"`
	User            struct {
		Username string `json:"username"`
	} `json:"user"`
	// ImpersonatedUser is the identity the request acted as, when the
	// authenticated user impersonated one.
	ImpersonatedUser struct {
		Username string `json:"username"`
	} `json:"impersonatedUser"`
	ObjectRef struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
		APIGroup    string `json:"apiGroup"`
	} `json:"objectRef"`
	ResponseStatus struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
	// RequestObject is the patch sent, for the hub's patches of Nodes and
	// Machines on a spoke (see auditPolicy); empty otherwise.
	RequestObject json.RawMessage `json:"requestObject,omitempty"`
	// ResponseObject is the object a write of a Node or Machine left, with
	// Options.AuditHistory; empty otherwise.
	ResponseObject json.RawMessage `json:"responseObject,omitempty"`
}

// ReadAudit returns every entry of an audit log (Options.Audit).
func ReadAudit(path string) ([]AuditEvent, error) { return ReadAuditFrom(path, 0) }

// ReadAuditFrom returns the entries from byte offset on. A line cut at the
// offset is skipped; any other malformed line is an error.
func ReadAuditFrom(path string, offset int64) ([]AuditEvent, error) {
	out, _, err := readAudit(path, offset, false)
	return out, err
}

// ReadAuditSince returns the complete entries from offset on (offset 0, or
// one ReadAuditSince returned) and the offset after the last of them, to
// follow a log as it grows: a line still being written is left for the next
// call.
func ReadAuditSince(path string, offset int64) ([]AuditEvent, int64, error) {
	return readAudit(path, offset, true)
}

func readAudit(path string, offset int64, whole bool) ([]AuditEvent, int64, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, offset, err
	}
	defer fh.Close()
	if _, err := fh.Seek(offset, io.SeekStart); err != nil {
		return nil, offset, err
	}
	var out []AuditEvent
	r := bufio.NewReaderSize(fh, 1<<20)
	first := true
	for {
		line, err := r.ReadBytes('\n')
		if err != nil {
			if errors.Is(err, io.EOF) && (whole || len(bytes.TrimSpace(line)) == 0) {
				return out, offset, nil // an unfinished line waits for the next call
			}
			if !errors.Is(err, io.EOF) {
				return out, offset, err
			}
		}
		var e AuditEvent
		if jerr := json.Unmarshal(line, &e); jerr != nil {
			if err != nil {
				// The last line, without its newline: the API server is still
				// writing it.
				return out, offset, nil
			}
			if first && offset > 0 && !whole {
				first = false
				offset += int64(len(line))
				continue
			}
			return out, offset, fmt.Errorf("audit log %s: %w", path, jerr)
		}
		first = false
		offset += int64(len(line))
		out = append(out, e)
		if err != nil {
			return out, offset, nil
		}
	}
}
