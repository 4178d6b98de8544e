// Package bufferedlog is the `buffered` log writer: it wraps another of
// Caddy's log writers (file, stderr, net, ...) in a memory buffer, so that
// log entries reach the kernel in a few large writes instead of one
// write(2) per entry.
//
// The trade-off: an entry may sit in memory for up to flush_interval (or
// until size bytes are waiting) before its writer sees it, and a process
// that is killed (SIGKILL, OOM, power loss) loses what was waiting. A
// graceful stop or a config reload flushes it, except the few lines Caddy
// logs after the modules' cleanups on its way out ("shutdown complete")
// and those other modules' cleanups log after this one's. See
// BENCHMARKS.md for what it saves per request.
//
//	log {
//		output buffered {
//			size           256KiB   # default
//			flush_interval 1s       # default
//			output file /var/log/systemone/gateway.log
//		}
//	}
package bufferedlog

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/dustin/go-humanize"
	"go.uber.org/zap/zapcore"
)

func init() {
	caddy.RegisterModule(Writer{})
}

// Defaults of the buffered writer.
const (
	DefaultSize          = 256 << 10
	DefaultFlushInterval = time.Second
)

// Writer buffers the log entries on their way to another writer.
type Writer struct {
	// WriterRaw is the writer the entries go to (`output` in the
	// Caddyfile; named writer here because the log's own writer object
	// already has an output key). Required.
	WriterRaw json.RawMessage `json:"writer,omitempty" caddy:"namespace=caddy.logging.writers inline_key=output"`
	// Size is how many bytes may wait before they are written. Default
	// 256 KiB.
	Size int `json:"size,omitempty"`
	// FlushInterval is the longest an entry waits. Default 1s.
	FlushInterval caddy.Duration `json:"flush_interval,omitempty"`

	output caddy.WriterOpener
}

// CaddyModule returns the Caddy module information.
func (Writer) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "caddy.logging.writers.buffered",
		New: func() caddy.Module { return new(Writer) },
	}
}

// Provision loads the wrapped writer and checks the numbers.
func (w *Writer) Provision(ctx caddy.Context) error {
	if w.WriterRaw == nil {
		return errors.New("buffered: an output writer is required")
	}
	if w.Size < 0 || w.FlushInterval < 0 {
		return errors.New("buffered: size and flush_interval must not be negative")
	}
	mod, err := ctx.LoadModule(w, "WriterRaw")
	if err != nil {
		return fmt.Errorf("buffered: loading its output: %v", err)
	}
	w.output = mod.(caddy.WriterOpener)
	return nil
}

func (w *Writer) size() int {
	if w.Size == 0 {
		return DefaultSize
	}
	return w.Size
}

func (w *Writer) flushInterval() time.Duration {
	if w.FlushInterval == 0 {
		return DefaultFlushInterval
	}
	return time.Duration(w.FlushInterval)
}

func (w *Writer) String() string {
	if w.output == nil {
		return "buffered(unprovisioned)"
	}
	return fmt.Sprintf("buffered(%s, %s)", w.output, w.flushInterval())
}

// WriterKey differs from the wrapped writer's, so that a config using both
// keeps them apart, and with the buffer's settings, so that a reload that
// changes them opens a new buffer.
func (w *Writer) WriterKey() string {
	return fmt.Sprintf("buffered:%d:%s:%s", w.size(), w.flushInterval(), w.output.WriterKey())
}

// OpenWriter opens the wrapped writer behind a buffer flushed every
// flush_interval, when size bytes wait, when the config that opened it
// stops or is replaced (Cleanup), and on Close.
func (w *Writer) OpenWriter() (io.WriteCloser, error) {
	out, err := w.output.OpenWriter()
	if err != nil {
		return nil, err
	}
	b := &buffered{
		key: w.WriterKey(),
		ws:  &zapcore.BufferedWriteSyncer{WS: zapcore.AddSync(out), Size: w.size(), FlushInterval: w.flushInterval()},
		out: out,
	}
	open.Lock()
	open.writers[b.key] = b
	open.Unlock()
	return b, nil
}

// Cleanup writes what waits in the buffer of this writer's key. Caddy
// shares an open writer between the configs that name the same one, and
// (as of v2.11) never closes a log writer when a config stops: its cleanup
// callback is lost. Module cleanups do run, on a stop and on every reload,
// so this is where a graceful stop gets the last entries written. The
// writer stays open for the config that follows.
func (w *Writer) Cleanup() error {
	if w.output == nil {
		return nil // Provision failed (Caddy cleans up such modules too)
	}
	open.Lock()
	b := open.writers[w.WriterKey()]
	open.Unlock()
	if b == nil {
		return nil
	}
	return b.ws.Sync()
}

// open is the buffered writers opened in this process, by key, for
// Cleanup.
var open = struct {
	sync.Mutex
	writers map[string]*buffered
}{writers: make(map[string]*buffered)}

// buffered is an open buffered writer.
type buffered struct {
	key string
	ws  *zapcore.BufferedWriteSyncer
	out io.WriteCloser
}

func (b *buffered) Write(p []byte) (int, error) { return b.ws.Write(p) }

// Close writes what waits, stops the flushing goroutine and closes the
// wrapped writer.
func (b *buffered) Close() error {
	open.Lock()
	if open.writers[b.key] == b {
		delete(open.writers, b.key)
	}
	open.Unlock()
	return errors.Join(b.ws.Stop(), b.out.Close())
}

// UnmarshalCaddyfile sets up the writer from Caddyfile tokens:
//
//	buffered {
//		size           <bytes>
//		flush_interval <duration>
//		output         <writer> [<args...>] [{ ... }]
//	}
func (w *Writer) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // the writer's name
	if d.NextArg() {
		return d.ArgErr()
	}
	for d.NextBlock(0) {
		switch d.Val() {
		case "size":
			if !d.NextArg() {
				return d.ArgErr()
			}
			n, err := humanize.ParseBytes(d.Val())
			if err != nil || n == 0 || n > 64<<20 {
				return d.Errf("size %q: want a size from 1B to 64MiB", d.Val())
			}
			w.Size = int(n)
			if d.NextArg() {
				return d.ArgErr()
			}
		case "flush_interval":
			if !d.NextArg() {
				return d.ArgErr()
			}
			dur, err := caddy.ParseDuration(d.Val())
			if err != nil || dur <= 0 {
				return d.Errf("flush_interval %q: want a positive duration", d.Val())
			}
			w.FlushInterval = caddy.Duration(dur)
			if d.NextArg() {
				return d.ArgErr()
			}
		case "output":
			if !d.NextArg() {
				return d.ArgErr()
			}
			name := d.Val()
			var wo caddy.WriterOpener
			// The standard streams are no Caddyfile unmarshalers (as in
			// Caddy's own log directive).
			switch name {
			case "stdout":
				wo = caddy.StdoutWriter{}
			case "stderr":
				wo = caddy.StderrWriter{}
			case "discard":
				wo = caddy.DiscardWriter{}
			default:
				unm, err := caddyfile.UnmarshalModule(d, "caddy.logging.writers."+name)
				if err != nil {
					return err
				}
				var ok bool
				if wo, ok = unm.(caddy.WriterOpener); !ok {
					return d.Errf("output %q is not a log writer", name)
				}
			}
			w.WriterRaw = caddyconfig.JSONModuleObject(wo, "output", name, nil)
		default:
			return d.Errf("unrecognized subdirective %q", d.Val())
		}
	}
	if w.WriterRaw == nil {
		return d.Err("buffered: missing output")
	}
	return nil
}

// Interface guards.
var (
	_ caddy.Provisioner     = (*Writer)(nil)
	_ caddy.CleanerUpper    = (*Writer)(nil)
	_ caddy.WriterOpener    = (*Writer)(nil)
	_ caddyfile.Unmarshaler = (*Writer)(nil)
)
