package cli

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

func command(run func(*cobra.Command, []string) error) (*cobra.Command, *bytes.Buffer, *bytes.Buffer) {
	cmd := &cobra.Command{Use: "calibrate <labels>", RunE: run, Args: cobra.ExactArgs(1)}
	cmd.Flags().Float64("target", 0, "agreement")
	SetUp(cmd, "docs/calibration.md")
	var out, errb bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errb)
	return cmd, &out, &errb
}

func TestErrorsAreOnePlainLine(t *testing.T) {
	for _, tt := range []struct {
		name   string
		args   []string
		run    error
		status int
		want   string
	}{
		{"failure", []string{"x"}, errors.New("GET http://h/labels: 404 Not Found\nsecond line"), StatusFailure,
			"systemone-gateway calibrate: GET http://h/labels: 404 Not Found; second line\n"},
		{"usage", []string{"x"}, Usagef("--target %v is not between 0 and 1", 2), StatusUsage,
			"systemone-gateway calibrate: --target 2 is not between 0 and 1 (see systemone-gateway calibrate -h)\n"},
		{"bad flag value", []string{"--target", "high", "x"}, nil, StatusUsage,
			`systemone-gateway calibrate: invalid argument "high" for "--target" flag: strconv.ParseFloat: parsing "high": invalid syntax (see systemone-gateway calibrate -h)` + "\n"},
		{"unknown flag", []string{"--targte", "0.9", "x"}, nil, StatusUsage,
			"systemone-gateway calibrate: unknown flag: --targte (see systemone-gateway calibrate -h)\n"},
		{"arguments", []string{}, nil, StatusUsage,
			"systemone-gateway calibrate: accepts 1 arg(s), received 0 (see systemone-gateway calibrate -h)\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cmd, out, errb := command(func(*cobra.Command, []string) error { return tt.run })
			cmd.SetArgs(tt.args)
			err := cmd.Execute()
			if got := Status(err); got != tt.status {
				t.Errorf("status %d (%v), want %d", got, err, tt.status)
			}
			if errb.String() != tt.want || out.Len() != 0 {
				t.Errorf("standard error %q, want %q; standard output %q", errb.String(), tt.want, out.String())
			}
		})
	}
	cmd, _, errb := command(func(c *cobra.Command, _ []string) error { return Exit(c, StatusFailure) })
	cmd.SetArgs([]string{"x"})
	if err := cmd.Execute(); Status(err) != StatusFailure || errb.Len() != 0 {
		t.Errorf("Exit: %v, printed %q", err, errb.String())
	}
}

func TestHelpNamesTheDocs(t *testing.T) {
	cmd, out, _ := command(nil)
	cmd.SetArgs([]string{"-h"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "Documentation: docs/calibration.md") || strings.Contains(out.String(), "caddyserver.com") {
		t.Errorf("help:\n%s", out.String())
	}
}
