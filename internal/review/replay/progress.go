package replay

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// progressEvery is how often the progress line is redrawn, at most.
const progressEvery = 200 * time.Millisecond

// progress shows a replay's counts on one line of a terminal, redrawn in
// place: only when standard error is a terminal, so that a script or a
// log file reads the lines as before, the summary last.
type progress struct {
	mu    sync.Mutex
	w     io.Writer
	tty   bool
	shown bool
	last  time.Time
}

func newProgress(w io.Writer) *progress {
	p := &progress{w: w}
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			p.tty = true
		}
	}
	return p
}

// show redraws the line with sum, at most every progressEvery.
func (p *progress) show(sum Summary) {
	if !p.tty {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if now := time.Now(); now.Sub(p.last) >= progressEvery {
		p.last = now
		fmt.Fprintf(p.w, "\r\033[Kreplay: %d entries so far: %d replayed, %d skipped, %d failed, %d tokens",
			sum.Replayed+sum.Skipped+sum.Failed, sum.Replayed, sum.Skipped, sum.Failed, sum.Tokens)
		p.shown = true
	}
}

// clear erases the line, if drawn, so that what follows starts clean.
func (p *progress) clear() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.shown {
		fmt.Fprint(p.w, "\r\033[K")
		p.shown = false
	}
}

// lineWriter is w for whole lines (an entry's failure): each is written
// on a line of its own, the progress line erased first.
func (p *progress) lineWriter() io.Writer {
	return writerFunc(func(b []byte) (int, error) {
		p.clear()
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.w.Write(b)
	})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }
