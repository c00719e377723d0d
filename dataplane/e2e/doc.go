// Package e2e holds end-to-end tests of the dataplane: a real port driver,
// the I/O loop, reassembly and egress, with a client on the other side of
// a socket.
package e2e
