package main

import (
	"context"
	"fmt"

	"github.com/hcpbot/hcpbot/internal/version"
)

func runVersion(_ context.Context, c *cli, args []string) error {
	fs := c.flagSet("version", "")
	if err := parse(fs, args); err != nil {
		return err
	}
	fmt.Fprintln(c.stdout, version.String())
	return nil
}
