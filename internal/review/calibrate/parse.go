package calibrate

import (
	"runtime"
	"sync"
)

// Reading `/labels` lines is mostly JSON decoding, line by line and each
// line on its own: a batch of lines is parsed on the machine's processors
// at once, and added to the sample in order.

// parseBatchLines is how many lines scanLines parses at once; parseChunk
// the fewest lines worth a goroutine of their own.
const (
	parseBatchLines = 2048
	parseChunk      = 64
)

// parseLines parses each text as parseLine does, on up to GOMAXPROCS
// goroutines: lines[i] and errs[i] are text i's.
func parseLines[T string | []byte](texts []T) (lines []Line, errs []error) {
	lines, errs = make([]Line, len(texts)), make([]error, len(texts))
	workers := min(runtime.GOMAXPROCS(0), len(texts)/parseChunk)
	if workers <= 1 {
		for i, text := range texts {
			lines[i], errs[i] = parseLine([]byte(text))
		}
		return lines, errs
	}
	chunk := (len(texts) + workers - 1) / workers
	var wg sync.WaitGroup
	for lo := 0; lo < len(texts); lo += chunk {
		hi := min(lo+chunk, len(texts))
		wg.Go(func() {
			for i := lo; i < hi; i++ {
				lines[i], errs[i] = parseLine([]byte(texts[i]))
			}
		})
	}
	wg.Wait()
	return lines, errs
}

// AddStored adds `/labels` lines already split, each one line's text (the
// review API's stored records), in order, as AddFrom adds the lines it
// reads; they are parsed on the machine's processors at once. At a bad
// line it stops, the lines before it added, and returns the line's place
// in texts and what is wrong with it (record.ParseLabel's error, or
// LineOf's).
func (s *Sample) AddStored(texts []string) (int, error) {
	lines, errs := parseLines(texts)
	for i, l := range lines {
		if errs[i] != nil {
			return i, errs[i]
		}
		s.Add(l)
	}
	return len(texts), nil
}
