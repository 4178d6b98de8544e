// Package cli gives the product's own subcommands (`calibrate`, `verify`,
// `replay`) the manners of a command-line tool inside Caddy's command line:
// help that names this binary and points to the product's docs, errors as
// one plain line on standard error, and the exit status a script can act
// on (2 for a usage error, 1 for a failure).
//
// Caddy logs an error a command returns as a structured log entry (JSON
// when standard error is not a terminal) and prints cobra's "Error:" line
// for others; neither is what an operator's script reads. So the commands
// print their error themselves and hand Caddy an exit status with nothing
// to log.
package cli

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/spf13/cobra"
)

// Binary is the command's name in help and messages.
const Binary = "systemone-gateway"

// Exit statuses.
const (
	// StatusFailure: the command ran and failed (a mismatch, an entry that
	// failed, an unreadable source).
	StatusFailure = 1
	// StatusUsage: the command line is wrong (a flag's value out of range,
	// an unknown flag, a missing argument).
	StatusUsage = 2
)

// Error is an error with the exit status it ends the command with.
type Error struct {
	Status int
	Err    error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// Usage is a usage error: exit status 2.
func Usage(err error) error { return &Error{Status: StatusUsage, Err: err} }

// Usagef is Usage with a formatted message.
func Usagef(format string, args ...any) error { return Usage(fmt.Errorf(format, args...)) }

// SetUp makes cmd one of the product's commands: its help ends with a
// pointer to docs (a path in the repository, with the heading to read),
// an unknown flag or a flag's unreadable value is a usage error, and
// errors its RunE and Args return are printed by Fail. Call it after the
// command's RunE and Args are set.
func SetUp(cmd *cobra.Command, docs string) {
	cmd.SetHelpTemplate(defaultHelp + "\nDocumentation: " + docs + "\n(in the " + Binary + " repository and release archive).\n")
	cmd.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return Fail(c, Usage(err))
	})
	if args := cmd.Args; args != nil {
		cmd.Args = func(c *cobra.Command, a []string) error {
			if err := args(c, a); err != nil {
				return Fail(c, Usage(err))
			}
			return nil
		}
	}
	if run := cmd.RunE; run != nil {
		cmd.RunE = func(c *cobra.Command, a []string) error {
			if err := run(c, a); err != nil {
				return Fail(c, err)
			}
			return nil
		}
	}
}

// defaultHelp is cobra's help template, without Caddy's footer (which
// points to Caddy's own docs).
var defaultHelp = (&cobra.Command{}).HelpTemplate()

// printed is an error Fail has printed already: its message, its exit
// status, and what Caddy's Main reads the status from.
type printed struct {
	msg    string
	status int
	exit   error
}

func (p printed) Error() string { return p.msg }
func (p printed) Unwrap() error { return p.exit }

// Fail prints err as one line on cmd's standard error, `<binary> <command>:
// <message>` (a usage error with a pointer to -h), and returns what makes
// Caddy exit with err's status (an *Error's, else 1) and print and log
// nothing more. An error Fail returned passes through unchanged.
func Fail(cmd *cobra.Command, err error) error {
	if err == nil {
		return nil
	}
	var p printed
	if errors.As(err, &p) {
		return err
	}
	status := StatusFailure
	var e *Error
	if errors.As(err, &e) {
		status = e.Status
	}
	msg := strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", "; ")), " ")
	if status == StatusUsage {
		msg += " (see " + Binary + " " + cmd.Name() + " -h)"
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "%s %s: %s\n", Binary, cmd.Name(), msg)
	err = Exit(cmd, status)
	p = err.(printed)
	p.msg = msg
	return p
}

// Exit ends cmd with status, printing nothing: for a command that has
// printed what it had to say (replay's summary stays its last line).
func Exit(cmd *cobra.Command, status int) error {
	cmd.SilenceErrors = true
	cmd.SilenceUsage = true
	if status > StatusFailure {
		// Caddy's wrapper turns a status above 1 with no error into the
		// exit status, and logs nothing.
		if exit := caddycmd.WrapCommandFuncForCobra(func(caddycmd.Flags) (int, error) { return status, nil })(cmd, nil); exit != nil {
			return printed{"exit status " + strconv.Itoa(status), status, exit}
		}
	}
	return printed{msg: "exit status " + strconv.Itoa(status), status: status}
}

// Status is the exit status Fail's error asks for: for tests, which run a
// command without Caddy's Main.
func Status(err error) int {
	var p printed
	var e *Error
	switch {
	case err == nil:
		return 0
	case errors.As(err, &p):
		return p.status
	case errors.As(err, &e):
		return e.Status
	}
	return StatusFailure
}
