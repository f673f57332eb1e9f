package localfleet

import (
	"bufio"
	"encoding/json"
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
	User            struct {
		Username string `json:"username"`
	} `json:"user"`
	ObjectRef struct {
		Resource  string `json:"resource"`
		Namespace string `json:"namespace"`
		Name      string `json:"name"`
		APIGroup  string `json:"apiGroup"`
	} `json:"objectRef"`
	ResponseStatus struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
}

// ReadAudit returns every entry of an audit log (Options.Audit).
func ReadAudit(path string) ([]AuditEvent, error) { return ReadAuditFrom(path, 0) }

// ReadAuditFrom returns the entries from byte offset on. A line cut at the
// offset is skipped; any other malformed line is an error.
func ReadAuditFrom(path string, offset int64) ([]AuditEvent, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	if _, err := fh.Seek(offset, io.SeekStart); err != nil {
		return nil, err
	}
	var out []AuditEvent
	sc := bufio.NewScanner(fh)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	first := true
	for sc.Scan() {
		var e AuditEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			if first && offset > 0 {
				first = false
				continue
			}
			return out, fmt.Errorf("audit log %s: %w", path, err)
		}
		first = false
		out = append(out, e)
	}
	return out, sc.Err()
}
