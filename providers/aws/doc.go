// Package aws is the AWS fencing method: through aws-sdk-go-v2's EC2 client it stops the
// node's instance with StopInstances and Force (the instance's OS is not asked to shut down:
// a fence does not wait for a partitioned machine's cooperation) and confirms with
// DescribeInstances until the instance reads "stopped" (the power package's fence). An
// instance that reads "terminated" is Gone: nothing is left to run the workload. One that reads
// "stopped" after a hibernation is not off (Hibernated): started, it resumes. An instance
// the region does not know is a BadTarget, never Gone: a wrong region or account must not look
// like a machine that no longer exists.
//
// The instance is the node's spec.providerID, "aws:///<zone>/<instance-id>"; the region is the
// method's, else the zone's. Credentials come from the method's Secret (accessKeyID,
// secretAccessKey, sessionToken) or the SDK's default chain (IRSA, environment, instance
// profile); a custom endpoint serves VPC endpoints, other partitions and tests.
package aws
