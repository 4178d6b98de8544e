package replay

import (
	"bytes"
	"fmt"
	"os"
	"testing"
)

// On a terminal the counts are redrawn on one line, erased before an
// entry's failure and before the summary; anywhere else nothing is drawn,
// so that a script reads the lines as before.
func TestProgress(t *testing.T) {
	var b bytes.Buffer
	p := &progress{w: &b, tty: true}
	p.show(Summary{Replayed: 2, Skipped: 1, Failed: 1, Tokens: 90})
	fmt.Fprintf(p.lineWriter(), "entry 4-0: answered 502\n")
	p.show(Summary{Replayed: 3}) // within progressEvery: not drawn
	p.clear()                    // nothing drawn since the failure: nothing to erase
	p.last = p.last.Add(-progressEvery)
	p.show(Summary{Replayed: 4})
	p.clear()
	want := "\r\033[Kreplay: 4 entries so far: 2 replayed, 1 skipped, 1 failed, 90 tokens" + "\r\033[K" + "entry 4-0: answered 502\n" +
		"\r\033[Kreplay: 4 entries so far: 4 replayed, 0 skipped, 0 failed, 0 tokens" + "\r\033[K"
	if b.String() != want {
		t.Errorf("terminal output %q, want %q", b.String(), want)
	}

	f, err := os.CreateTemp(t.TempDir(), "stderr")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	q := newProgress(f)
	q.show(Summary{Replayed: 1})
	q.clear()
	if st, _ := f.Stat(); q.tty || st.Size() != 0 {
		t.Errorf("a file is not a terminal: tty %v, %d bytes written", q.tty, st.Size())
	}
}
