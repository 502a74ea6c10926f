// Command hcpbot is the chat-ops bot for hosted control planes behind HTTP
// proxies: one binary whose subcommands run the agent (per management
// cluster), the bot (central), both together, the demo, and offline tools.
//
// Each subcommand's file wires it from flags to running, in the order
// start-up does it; split, a reader would lose that order:
//
// agent.go is over 450 lines: `hcpbot agent`, from flags and configuration
// to the watchers, the NATS connection, the executor and the ops listener.
//
// bot.go is over 450 lines: `hcpbot bot` and `hcpbot all`, from
// configuration to the stream, the approval flow, the fleet and Slack.
//
// config.go is over 450 lines: `hcpbot config check`, each problem start-up
// would meet (role, store directory, kubeconfig, Slack, proxy) checked in
// start-up's order, then the report.
//
// demo.go is over 450 lines: `hcpbot demo`, one scripted session against
// the real API servers, read as the script it plays.
package main
