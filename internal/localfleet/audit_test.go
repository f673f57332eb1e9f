package localfleet

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadAuditSinceFollowsAGrowingLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	line := func(verb string) string { return `{"stage":"ResponseComplete","verb":"` + verb + `"}` + "\n" }
	if err := os.WriteFile(path, []byte(line("get")+`{"stage":"ResponseCo`), 0o600); err != nil {
		t.Fatal(err)
	}
	got, off, err := ReadAuditSince(path, 0)
	if err != nil || len(got) != 1 || got[0].Verb != "get" || off != int64(len(line("get"))) {
		t.Fatalf("first read: %+v %d %v", got, off, err)
	}
	// The unfinished line is completed, and another follows.
	fh, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fh.WriteString(`mplete","verb":"list"}` + "\n" + line("watch")); err != nil {
		t.Fatal(err)
	}
	_ = fh.Close()
	got, off2, err := ReadAuditSince(path, off)
	if err != nil || len(got) != 2 || got[0].Verb != "list" || got[1].Verb != "watch" {
		t.Fatalf("second read: %+v %v", got, err)
	}
	if st, _ := os.Stat(path); off2 != st.Size() {
		t.Fatalf("offset %d, size %d", off2, st.Size())
	}
	if got, off3, err := ReadAuditSince(path, off2); err != nil || len(got) != 0 || off3 != off2 {
		t.Fatalf("third read: %+v %d %v", got, off3, err)
	}
	// ReadAuditFrom keeps skipping a line cut at its offset.
	all, err := ReadAuditFrom(path, 3)
	if err != nil || len(all) != 2 {
		t.Fatalf("ReadAuditFrom: %+v %v", all, err)
	}
}

func TestAuditPolicyNamesEveryUser(t *testing.T) {
	p := auditPolicy([]string{"a", `b"c`}, false)
	want := `users: ["a", "b\"c"]`
	if !strings.Contains(p, want) {
		t.Fatalf("policy lacks %s:\n%s", want, p)
	}
}
