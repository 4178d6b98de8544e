package calibrate_test

import (
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/systemone/systemone-gateway/internal/review/calibrate"
)

// The documented commands run as shown, against a /labels endpoint behind
// basic auth serving the example's labels, in a directory of their own:
// calibrate, calibrate --certificates, verify from the labels, verify
// --config against the pasted block.
func TestEscalationDocCommands(t *testing.T) {
	srv := calibrate.LabelsServer(t, calibrate.EscalationExample())
	review := strings.Replace(srv.URL, "http://", "http://ann:secret@", 1) + "/review"
	blocks := escalationShellBlocks(t)
	dir := t.TempDir()
	t.Chdir(dir) // the commands' files (certificates.jsonl, Caddyfile) are relative

	// The example's labels as an export and replay --escalate's output
	// would hold them: the first answers, and the second.
	var export, escalated strings.Builder
	for _, line := range strings.SplitAfter(calibrate.EscalationExample(), "\n") {
		if strings.Contains(line, `"stage":2`) {
			escalated.WriteString(line)
		} else {
			export.WriteString(line)
		}
	}
	write(t, dir, "labels.ndjson", export.String())
	write(t, dir, "escalated.ndjson", escalated.String())

	var ran []string
	for _, b := range blocks {
		for _, c := range strings.Split(strings.TrimSpace(b), "\n") {
			var stdin io.Reader
			if files, command, ok := strings.Cut(c, " | "); ok && strings.HasPrefix(files, "cat ") {
				var in strings.Builder
				for _, f := range strings.Fields(files)[1:] {
					data, err := os.ReadFile(f)
					if err != nil {
						t.Fatal(err)
					}
					in.Write(data)
				}
				stdin, c = strings.NewReader(in.String()), command
			}
			args := strings.Fields(strings.ReplaceAll(c, `"$REVIEW/labels"`, review+"/labels"))
			if len(args) < 2 || args[0] != "systemone-gateway" {
				t.Fatalf("docs/escalation.md: the test does not know how to run %q", c)
			}
			switch args[1] {
			case "calibrate":
				out, err := runSubcommand(t, stdin, "calibrate", args[2:]...)
				if err != nil || !strings.Contains(out, "escalate service-1.0.0 to service-2.0.0 {") {
					t.Errorf("%s: %v\n%s", c, err, out)
				}
				fragment := regexp.MustCompile(`(?s)route \{.*\n\}\n`).FindString(out)
				site := ":8080 {\n\tsystemone {\n" + fragment + "\t}\n\treverse_proxy localhost:9080\n}\n"
				if err := os.WriteFile("Caddyfile", []byte(site), 0o600); err != nil {
					t.Fatal(err)
				}
			case "verify":
				out, err := runVerify(t, args[2:]...)
				if err != nil || !strings.HasPrefix(out, "ok ") {
					t.Errorf("%s: %v\n%s", c, err, out)
				}
			default:
				t.Fatalf("docs/escalation.md: the test does not know how to run %q", c)
			}
			ran = append(ran, args[1])
		}
	}
	if strings.Join(ran, " ") != "calibrate calibrate calibrate verify verify" {
		t.Errorf("ran %q: the test knows docs/escalation.md's five commands", ran)
	}
	if _, err := os.Stat(filepath.Join(dir, "certificates.jsonl")); err != nil {
		t.Errorf("the documented --certificates wrote no file: %v", err)
	}
}

// escalationShellBlocks returns the ```sh blocks of docs/escalation.md.
func escalationShellBlocks(t *testing.T) []string {
	t.Helper()
	doc, err := os.ReadFile("../../../docs/escalation.md")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(string(doc), -1) {
		out = append(out, m[1])
	}
	return out
}
