// Package orders carries out the controller's orders on the node agent: the Commander runs each
// order (a Terminate, or the agent's own self-fence) once per ID and one at a time, through the
// palisade-executor child process (providers/executor/child), and keeps the status the heartbeats
// report; the APIWatcher brings the orders of this node's NodeFence through the API server, for a
// node whose direct channel to the controller is cut, and answers there.
package orders
