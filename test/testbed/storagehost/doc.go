// Package storagehost is a storage host in a network namespace for storage-fence tests. Its TCP
// service, on port 3260 of the host's address, answers "block device\n" to every connection: a
// stand-in for an iSCSI or NFS target, for what a storage fence must stop is the node reaching
// it at all. Served tells a node that is served from one refused outright (a reject rule) and
// fails the test on anything else, such as a timeout. NFT is the nft command in the host's
// namespace (a gateway's gateway.Config.NFT), ServeTLS serves a handler there, and WriteCerts
// writes a CA, a server pair for the host and the controller's client certificate.
package storagehost
