// Package ipmisim runs a real IPMI BMC for a simulated node: one ipmi_sim process (Debian
// openipmi) per BMC, listening for IPMI v2 / RMCP+ on its own UDP port on 127.0.0.1 (or Options.Host), whose
// chassis is a small shell script writing the machine's power state to a file. Tests and
// simulated nodes read that file (PoweredOn) to learn whether the machine runs; SetPower plays
// the physical world (a pulled plug), SetIgnoreOff makes a lying BMC that accepts "chassis power
// off" and leaves the power on, and OffCommands counts the power-off commands that reached the
// chassis. Everything lives in Options.Dir; Stop kills the process group and leaves no process.
package ipmisim
