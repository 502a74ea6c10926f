// Package kubeconfig turns a hosted cluster's admin kubeconfig, which is
// untrusted input, into a *rest.Config without reading a file or running a
// program.
//
// The admin kubeconfig Secret of a HostedCluster is writable by anyone who
// may write Secrets in the HostedCluster's namespace. Handed to clientcmd's
// ClientConfig, a tampered one makes the reader run a program (exec,
// auth-provider), read local files and send them to the server it names
// (tokenFile, client-certificate, client-key, certificate-authority), turn
// off TLS verification, route traffic through a proxy of its choosing or
// impersonate another identity. [RESTConfig] accepts only what HyperShift
// writes: an https:// server, inline certificate-authority-data, inline
// client-certificate-data with client-key-data, an inline token, and
// tls-server-name. Everything else that could read, run or redirect is
// refused with an [*Error] whose reason names the field and the
// context, user or cluster holding it, never a value from the file.
//
// The bytes are decoded strictly with clientcmd's own scheme and types
// (clientcmd.Load drops unknown fields silently, and a field this package
// does not know is one it cannot vouch for), and the rest.Config is built
// field by field from the current context, never through clientcmd's
// ClientConfig. Every cluster and user in the file is checked, not only
// those of the current context, so no entry that would read or run
// something passes unnoticed. Extensions and preferences are inert data
// without exec and are ignored; so is a context's namespace.
//
// Both the agent (package watchers, which watches hosted clusters) and the
// action executor (package actions) build their hosted clients here.
package kubeconfig
