package caddyfile

import (
	"fmt"
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

// oneOf reads exactly one argument, placeholders resolved, that must be
// one of the values the policy's package lists.
func oneOf(d *caddyfile.Dispenser, allowed []string) (string, error) {
	v, err := resolvedArg(d)
	if err != nil {
		return "", err
	}
	if !slices.Contains(allowed, v) {
		return "", d.Errf("%q is not one of %v", v, allowed)
	}
	if d.NextArg() {
		return "", d.ArgErr()
	}
	return v, nil
}

// listOf reads one or more arguments, placeholders resolved, each one of
// the values the policy's package lists.
func listOf(d *caddyfile.Dispenser, allowed []string) ([]string, error) {
	var out []string
	for d.NextArg() {
		v := caddy.NewReplacer().ReplaceAll(d.Val(), "")
		if !slices.Contains(allowed, v) {
			return nil, d.Errf("%q is not one of %v", v, allowed)
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		return nil, d.ArgErr()
	}
	return out, nil
}

// blockErr reports an error that a policy's Validate found in a whole
// block, at the line that opened the block. Call it where the block begins.
func blockErr(d *caddyfile.Dispenser) func(error) error {
	name, file, line := d.Val(), d.File(), d.Line()
	return func(err error) error {
		return fmt.Errorf("%s: %v, at %s:%d", name, err, file, line)
	}
}

// lineErr reports an error that a policy's Validate found in a block, at
// the line of the current token, as d.WrapErr would there: call it where
// the block begins, use it once the block is read.
func lineErr(d *caddyfile.Dispenser) func(error) error {
	file, line := d.File(), d.Line()
	return func(err error) error {
		return fmt.Errorf("%w, at %s:%d", err, file, line)
	}
}

// countArg reads a non-negative whole number (0 turns a bucket off).
func countArg(d *caddyfile.Dispenser) (*int64, error) {
	v, err := resolvedArg(d)
	if err != nil {
		return nil, err
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return nil, d.Errf("%q is not a whole number >= 0", v)
	}
	if d.NextArg() {
		return nil, d.ArgErr()
	}
	return &n, nil
}

// countOf reads a whole number >= 0 and has the policy's check turn it
// into its value (check names the option in its message).
func countOf[T any](d *caddyfile.Dispenser, check func(option string, n int64) (T, error)) (T, error) {
	option := d.Val() // the subdirective, before its argument is read
	n, err := countArg(d)
	if err != nil {
		var zero T
		return zero, err
	}
	v, err := check(option, *n)
	if err != nil {
		return v, d.Err(err.Error())
	}
	return v, nil
}

// fractionArg reads one number (the route policy checks its range).
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

func durationArg(d *caddyfile.Dispenser) (caddy.Duration, error) {
	v, err := resolvedArg(d)
	if err != nil {
		return 0, err
	}
	dur, err := caddy.ParseDuration(v)
	if err != nil || dur <= 0 {
		return 0, d.Errf("%q is not a positive duration", v)
	}
	if d.NextArg() {
		return 0, d.ArgErr()
	}
	return caddy.Duration(dur), nil
}

func sizeArg(d *caddyfile.Dispenser) (uint64, error) {
	v, err := resolvedArg(d)
	if err != nil {
		return 0, err
	}
	size, err := humanize.ParseBytes(v)
	if err != nil {
		return 0, d.Errf("%q is not a size (such as 4MiB or 512KB)", v)
	}
	if d.NextArg() {
		return 0, d.ArgErr()
	}
	return size, nil
}
