package drain

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestRetireWithNothingInFlightReleasesAtOnce(t *testing.T) {
	var g Gate
	released := 0
	g.Retire(func() { released++ })
	if released != 1 {
		t.Fatalf("released %d times, want 1", released)
	}
	if g.Enter() {
		t.Error("a request after the release was told its resources are held")
	}
	g.Exit()
	if released != 1 {
		t.Fatalf("a late request's exit released again (%d)", released)
	}
}

func TestTheLastRequestOutReleases(t *testing.T) {
	var g Gate
	released := make(chan struct{}, 2)
	for range 2 {
		if !g.Enter() {
			t.Fatal("a live gate refused its resources")
		}
	}
	g.Retire(func() { released <- struct{}{} })
	if len(released) != 0 {
		t.Fatal("released with two requests in flight")
	}
	if !g.Enter() {
		t.Fatal("a request arriving while the retired gate drains was told its resources are gone")
	}
	g.Exit()
	g.Exit()
	if len(released) != 0 {
		t.Fatal("released with one request in flight")
	}
	g.Exit()
	<-released // on a goroutine of its own: the test's timeout bounds the wait
	if g.Enter() {
		t.Error("a request after the release was told its resources are held")
	}
	g.Exit()
	if len(released) != 0 {
		t.Fatal("released twice")
	}
}

// The last request out does not wait for the release (a final flush to a
// slow Redis): its response is finished when its handler returns.
func TestTheLastExitDoesNotWaitForTheRelease(t *testing.T) {
	var g Gate
	g.Enter()
	unblock, ran := make(chan struct{}), make(chan struct{})
	g.Retire(func() {
		<-unblock
		close(ran)
	})
	exited := make(chan struct{})
	go func() {
		g.Exit()
		close(exited)
	}()
	select {
	case <-exited:
	case <-time.After(10 * time.Second): // only when it fails
		t.Fatal("the last Exit waits for the release")
	}
	close(unblock)
	<-ran
}

// Under concurrent requests the release runs once, after every request
// that entered before it has exited.
func TestReleaseRunsOnceAfterEveryHeldRequest(t *testing.T) {
	for range 200 {
		var g Gate
		var inside, releases atomic.Int64
		var early atomic.Bool
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for range 50 {
					held := g.Enter()
					if held {
						inside.Add(1)
					}
					if held && releases.Load() != 0 {
						early.Store(true)
					}
					if held {
						inside.Add(-1)
					}
					g.Exit()
				}
			}()
		}
		close(start)
		done := make(chan struct{}, 2)
		g.Retire(func() {
			if inside.Load() != 0 {
				early.Store(true)
			}
			releases.Add(1)
			done <- struct{}{}
		})
		wg.Wait()
		<-done // at once, or on the last request's own goroutine
		if n := releases.Load(); n != 1 {
			t.Fatalf("released %d times, want 1", n)
		}
		if early.Load() {
			t.Fatal("released while a request that held the resources was inside")
		}
	}
}

func TestNilGateReleasesAtOnce(t *testing.T) {
	var g *Gate
	released := false
	if !g.Enter() {
		t.Error("a nil gate reported released resources")
	}
	g.Exit()
	g.Retire(func() { released = true })
	if !released {
		t.Error("a nil gate did not release")
	}
}
