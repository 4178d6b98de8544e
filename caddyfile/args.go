package caddyfile

import (
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/dustin/go-humanize"
)

// block calls fn with the name of each subdirective in the block at the
// dispenser's nesting, refusing one given twice unless it is repeatable.
func block(d *caddyfile.Dispenser, fn func(name string) error, repeatable ...string) error {
	seen := map[string]bool{}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		name := d.Val()
		if seen[name] && !slices.Contains(repeatable, name) {
			return d.Errf("duplicate %s", name)
		}
		seen[name] = true
		if err := fn(name); err != nil {
			return err
		}
	}
	return nil
}

// section reports what a policy's Validate finds wrong in a block: the
// error as Validate words it, after the block's name (as the handler names
// the block when it provisions a JSON config, so that both say the same),
// wrapped by Dispenser.WrapErr with the file, line and import chain of the
// token the section was taken at.
type section struct {
	name string
	at   caddyfile.Dispenser // a copy, its cursor left where the section was taken
}

// sectionAt takes the section of the block whose name the dispenser is at.
func sectionAt(d *caddyfile.Dispenser) section {
	return section{name: d.Val(), at: *d}
}

// here is the same section, reporting at the dispenser's current token
// (the line of a pin inside the route block, say).
func (s section) here(d *caddyfile.Dispenser) section {
	return section{name: s.name, at: *d}
}

// wrap returns err, if any, as the section's.
func (s section) wrap(err error) error {
	if err == nil {
		return nil
	}
	return s.at.WrapErr(fmt.Errorf("%s: %w", s.name, err))
}

// stringArg reads exactly one argument, kept verbatim (placeholders included).
func stringArg(d *caddyfile.Dispenser) (string, error) {
	if !d.NextArg() {
		return "", d.ArgErr()
	}
	v := d.Val()
	if v == "" {
		return "", d.Errf("%s must not be empty", lastDirective(d))
	}
	return v, nil
}

// lastDirective names the subdirective whose argument is being read.
func lastDirective(d *caddyfile.Dispenser) string {
	d.Prev()
	name := d.Val()
	d.Next()
	return name
}

// resolvedArg reads one argument with placeholders such as {env.NAME}
// replaced, for values that must be parsed now.
func resolvedArg(d *caddyfile.Dispenser) (string, error) {
	if !d.NextArg() {
		return "", d.ArgErr()
	}
	return caddy.NewReplacer().ReplaceAll(d.Val(), ""), nil
}

// wordArg reads exactly one argument, placeholders resolved: a value such
// as own|reject, which the policy's Validate checks.
func wordArg(d *caddyfile.Dispenser) (string, error) {
	v, err := resolvedArg(d)
	if err != nil {
		return "", err
	}
	if d.NextArg() {
		return "", d.ArgErr()
	}
	return v, nil
}

// wordsArg reads one or more arguments, placeholders resolved: values such
// as risk levels, which the policy's Validate checks.
func wordsArg(d *caddyfile.Dispenser) ([]string, error) {
	var out []string
	for d.NextArg() {
		out = append(out, caddy.NewReplacer().ReplaceAll(d.Val(), ""))
	}
	if len(out) == 0 {
		return nil, d.ArgErr()
	}
	return out, nil
}

// notZero refuses a 0 written for option. In a JSON config 0 (or nothing)
// leaves an option at its default; a Caddyfile says so by leaving the line
// out, so a 0 written there is a mistake, not a request for the default.
func notZero(d *caddyfile.Dispenser, option string, isZero bool) error {
	if isZero {
		return d.Errf("%s must not be 0: leave it out for its default", option)
	}
	return nil
}

// wholeArg reads exactly one whole number, placeholders resolved, of any
// sign (the policy's Validate checks its range).
func wholeArg(d *caddyfile.Dispenser) (int64, error) {
	v, err := resolvedArg(d)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, d.Errf("%q is not a whole number", v)
	}
	if d.NextArg() {
		return 0, d.ArgErr()
	}
	return n, nil
}

// countArg reads a whole number that may be 0 (0 turns a bucket off).
func countArg(d *caddyfile.Dispenser) (*int64, error) {
	n, err := wholeArg(d)
	if err != nil {
		return nil, err
	}
	return &n, nil
}

// nonZeroArg reads a whole number other than 0 (see notZero).
func nonZeroArg(d *caddyfile.Dispenser) (int64, error) {
	option := d.Val()
	n, err := wholeArg(d)
	if err != nil {
		return 0, err
	}
	return n, notZero(d, option, n == 0)
}

// uint32Arg reads a whole number from 1 to the most a uint32 holds: a
// number the JSON config holds in a uint32, 0 being its default there.
func uint32Arg(d *caddyfile.Dispenser) (uint32, error) {
	option := d.Val()
	v, err := resolvedArg(d)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseUint(v, 10, 32)
	if err != nil {
		return 0, d.Errf("%q is not a whole number up to %d", v, uint32(math.MaxUint32))
	}
	if d.NextArg() {
		return 0, d.ArgErr()
	}
	return uint32(n), notZero(d, option, n == 0)
}

// fractionArg reads one number (the policy checks its range).
func fractionArg(d *caddyfile.Dispenser) (float64, error) {
	f, err := numberArg(d)
	if err != nil {
		return 0, err
	}
	if d.NextArg() {
		return 0, d.ArgErr()
	}
	return f, nil
}

// numberArg reads one number, placeholders resolved, leaving the rest of
// the line to the caller.
func numberArg(d *caddyfile.Dispenser) (float64, error) {
	v, err := resolvedArg(d)
	if err != nil {
		return 0, err
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return 0, d.Errf("%q is not a number", v)
	}
	return f, nil
}

// durationArg reads exactly one duration other than 0 (see notZero); a
// negative one is left to the policy's Validate.
func durationArg(d *caddyfile.Dispenser) (caddy.Duration, error) {
	return namedDurationArg(d, d.Val())
}

// namedDurationArg is durationArg for an argument that is not the first of
// its line, named option.
func namedDurationArg(d *caddyfile.Dispenser, option string) (caddy.Duration, error) {
	v, err := resolvedArg(d)
	if err != nil {
		return 0, err
	}
	dur, err := caddy.ParseDuration(v)
	if err != nil {
		return 0, d.Errf("%q is not a duration (such as 250ms or 2s)", v)
	}
	if d.NextArg() {
		return 0, d.ArgErr()
	}
	return caddy.Duration(dur), notZero(d, option, dur == 0)
}

// sizeArg reads exactly one size other than 0 (see notZero), in bytes.
func sizeArg(d *caddyfile.Dispenser) (int64, error) {
	option := d.Val()
	v, err := resolvedArg(d)
	if err != nil {
		return 0, err
	}
	size, err := humanize.ParseBytes(v)
	if err != nil || size > math.MaxInt64 {
		return 0, d.Errf("%q is not a size (such as 4MiB or 512KB)", v)
	}
	if d.NextArg() {
		return 0, d.ArgErr()
	}
	return int64(size), notZero(d, option, size == 0)
}
