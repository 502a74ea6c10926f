// Package configs reads and validates hcpbot's configuration file.
//
// The file is YAML with the top-level sections nats, agent, bot, slack,
// approvals, identities, digests and log; example.yaml ([Example]) shows and documents
// every field and its default. Parsing is strict: unknown keys, values of
// the wrong type or shape, and combinations the processes would refuse at
// start (replicas on the embedded server, a renew deadline longer than the
// lease, ...) are problems. [Parse] and [Load] collect every problem in one
// pass and return them together as an [*Error], each [Problem] naming the
// file, the line and the field:
//
//	hcpbot.yaml:12: approvals.approvers[1]: "bob" is not a Slack user ID (U…/W…; ...)
//
// Defaults are applied only after a configuration is found valid, so the
// checks judge what the operator wrote.
//
// [Fields] lists every field the schema knows, read from the decoder's own
// tables: cmd/hcpbot's TestConfigFieldsAtRuntime demands a runtime proof
// of each, so a field that only parses cannot be added unnoticed.
//
// The identities section ([Config.Identities], an [identity.Map]) is read
// by both processes: the bot and the agent of each management cluster take
// it from the same file. Its checks keep the agent from ever acting as a
// system identity (system:masters, a ServiceAccount) and from having two
// identities for one person on one management cluster, and refuse
// required: true with nobody mapped.
//
// Credentials never appear in the file: every secret is referenced by an
// environment variable name (…Env) or a file path (…File), and any value
// shaped like a Slack token or NATS credentials is rejected without being
// echoed. [Config.Secrets] (and [Config.SecretsFor] a [Role]: the agent
// reads only the NATS references) resolves the references and parses the
// files that have a format; its [*Error] lists every problem with the
// field's line, naming the variable or file, never the value.
//
// Deployment manifests live next to this package: configs/deploy (Kustomize
// bases for the agent, the bot and a NATS cluster) and configs/slack (the
// Slack app manifest).
//
// schema.go is over 450 lines: the schema is one table read top to bottom,
// the decoder walking the YAML in the document's order, one method a
// section, then the checks across sections and the defaults; a reader
// looking for a field's rules follows the file as the file follows the
// configuration.
//
// config.go is over 450 lines: it holds the configuration's types, one
// struct a section of the file in the file's order, each field with its
// meaning, and Load and Parse that fill them; the types are the reference
// a user reads while writing a configuration.
package configs
