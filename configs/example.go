package configs

import _ "embed"

// Example is example.yaml: a configuration using every section, each
// field commented with its meaning and default. A test keeps it valid, so
// it can be handed out as a starting point (`hcpbot config check` accepts
// it). It is a string so no caller can change it for the others.
//
//go:embed example.yaml
var Example string
