package redistest

import "testing"

func TestStartStopRestart(t *testing.T) {
	s := Start(t)
	if reply, err := s.Do("SET", "k", "v"); err != nil || reply != "+OK" {
		t.Fatalf("SET: %q %v", reply, err)
	}
	s.Stop()
	if _, err := s.Do("PING"); err == nil {
		t.Fatal("PING succeeded on a stopped server")
	}
	s.Restart()
	if reply, err := s.Do("GET", "k"); err != nil || reply != "$-1" {
		t.Fatalf("GET after restart: %q %v, want an empty server", reply, err)
	}
}

func TestCluster(t *testing.T) {
	c := StartCluster(t, 3)
	if len(c.URLs()) != 3 {
		t.Fatalf("urls: %v", c.URLs())
	}
}
