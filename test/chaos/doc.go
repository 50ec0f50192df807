// Package chaos draws the seeded, reproducible fault schedules of `make chaos` (issue 9): each
// run picks one or more faults — power loss, partitions, an API server cut from etcd, a killed
// kubelet, agent or controller leader, a lying or slow BMC, the controller cut from the API —
// at random moments of a fault window, from a seed alone, so that a failing run replays
// exactly with the command Schedule.Replay prints. The schedule also says which machines may
// rightly be fenced (MayFence): a fence of any other is a fence of a healthy node.
package chaos
