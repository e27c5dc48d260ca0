package redlock

// ShardChannel returns the channel that a master which is a Redis Cluster
// uses for wake-ups of the Lock calls waiting for key: channel with a hash
// tag of key's slot appended ("{" tag "}"), so that the channel is in the
// slot of key. A script that frees key SPUBLISHes on it (handon.lua): sharded
// pub/sub counts and reaches the listeners on the shard that serves the slot,
// the one that runs the script, where a PUBLISH would count only that
// shard's listeners and reach every node's. A Node whose [Traits] declare
// ShardChannels is asked to Subscribe such channels (see [Node]).
//
// A channel that ends with "}" is a shard channel: the scripts SPUBLISH on
// it, and PUBLISH on any other. The Redlock's own channels never end so.
func ShardChannel(channel, key string) string {
	return channel + "{" + slotTags()[keySlot(key)] + "}"
}
