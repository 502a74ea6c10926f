package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/nats-io/nkeys"
)

func init() {
	extraCommands = append(extraCommands, command{name: "keygen", summary: "create an nkeys user key pair: the seed to a file (0600), the public key to stdout", run: runKeygen})
}

// runKeygen makes the key pairs hcpbot needs: the bot's signing key for
// approved actions (approvals.signingKeyFile; agents list the public key
// in trustedKeys) and the NATS users of the deployment (nats.nkeySeedFile;
// the public key goes into the server's nkeys.env). The seed never goes
// to the terminal.
func runKeygen(_ context.Context, c *cli, args []string) error {
	fs := c.flagSet("keygen", "--out FILE")
	out := fs.String("out", "", "file to write the seed to (created with mode 0600; an existing file is not overwritten)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *out == "" {
		return usageErrorf("--out is required: the seed is a secret and is never printed")
	}
	kp, err := nkeys.CreateUser()
	if err != nil {
		return fmt.Errorf("keygen: %w", err)
	}
	defer kp.Wipe()
	seed, err := kp.Seed()
	if err != nil {
		return fmt.Errorf("keygen: %w", err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return fmt.Errorf("keygen: %w", err)
	}
	if err := writeNew(*out, append(seed, '\n')); err != nil {
		return err
	}
	fmt.Fprintln(c.stdout, pub)
	return nil
}

// writeNew creates path with data, readable by its owner only; it never
// replaces a file (a key in use would be lost).
func writeNew(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("keygen: %s exists; not overwriting a key", path)
	}
	if err != nil {
		return fmt.Errorf("keygen: %w", err)
	}
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		return fmt.Errorf("keygen: write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("keygen: write %s: %w", path, err)
	}
	return nil
}
