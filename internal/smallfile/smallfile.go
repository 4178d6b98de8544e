// Package smallfile reads a configuration file whole, bounded: a file the
// config names (org_keys, a certificates file) is read at provisioning,
// where a device or a runaway file must fail at once with a clear error
// rather than read forever or fill the memory.
package smallfile

import (
	"fmt"
	"io"
	"os"
)

// MaxSize is the most a file read here may hold: 16 MiB, far above the
// largest real org_keys or certificates file (a key digest and an org id
// are under 100 bytes, a certificate about 500).
const MaxSize = 16 << 20

// Read returns the contents of the regular file at path, of at most max
// bytes. A directory, device, pipe or socket is refused without reading
// it, and so is a larger file, whatever its size claims while it is read.
func Read(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !info.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file (%s)", path, kind(info.Mode()))
	}
	if info.Size() > max {
		return nil, tooLarge(path, max)
	}
	// The file may grow between Stat and the read: one byte past max tells.
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max {
		return nil, tooLarge(path, max)
	}
	return data, nil
}

func tooLarge(path string, max int64) error {
	return fmt.Errorf("%s is larger than %d MiB, the most a config file may hold", path, max>>20)
}

// kind names a file mode that is not a regular file's.
func kind(m os.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&os.ModeCharDevice != 0:
		return "a character device"
	case m&os.ModeDevice != 0:
		return "a device"
	case m&os.ModeNamedPipe != 0:
		return "a named pipe"
	case m&os.ModeSocket != 0:
		return "a socket"
	}
	return "mode " + m.String()
}
