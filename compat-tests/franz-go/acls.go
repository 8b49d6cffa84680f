// The ACL matrix, run by compat-tests/security against Cairn and against Apache Kafka
// (not by this folder's run.sh):
//
//	go run . -acl-admin 127.0.0.1:9092 -acl-sasl 127.0.0.1:9096
//
// Both brokers run the StandardAuthorizer with User:ANONYMOUS (the PLAINTEXT admin
// address) as super user and PLAIN users alice, bob and carol on the SASL_PLAINTEXT
// address. As the super user it creates four topics and a set of ACLs (literal,
// prefixed, wildcard, DENY, host-bound, implied operations); then each of alice, bob and
// carol sends every request below straight to the broker, with kmsg, and one line per
// answer is printed: "<principal> <request> <target> <error code>" (or the names a list
// request returned). security/run.sh runs it on both brokers and compares the lines:
// Cairn must answer as Kafka does, error code for error code.
package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"
)

var matrixTopics = []string{"m-orders", "m-pay-in", "m-pay-secret", "m-hidden"}

type aclSpec struct {
	rt      kmsg.ACLResourceType
	name    string
	pattern kmsg.ACLResourcePatternType
	who     string
	host    string
	op      kmsg.ACLOperation
	perm    kmsg.ACLPermissionType
}

var matrixACLs = []aclSpec{
	{kmsg.ACLResourceTypeTopic, "m-orders", kmsg.ACLResourcePatternTypeLiteral, "User:alice", "*", kmsg.ACLOperationWrite, kmsg.ACLPermissionTypeAllow},
	{kmsg.ACLResourceTypeTopic, "m-pay-", kmsg.ACLResourcePatternTypePrefixed, "User:alice", "*", kmsg.ACLOperationRead, kmsg.ACLPermissionTypeAllow},
	{kmsg.ACLResourceTypeTopic, "m-pay-secret", kmsg.ACLResourcePatternTypeLiteral, "User:alice", "*", kmsg.ACLOperationAll, kmsg.ACLPermissionTypeDeny},
	{kmsg.ACLResourceTypeTopic, "*", kmsg.ACLResourcePatternTypeLiteral, "User:bob", "*", kmsg.ACLOperationDescribe, kmsg.ACLPermissionTypeAllow},
	{kmsg.ACLResourceTypeTopic, "m-hidden", kmsg.ACLResourcePatternTypeLiteral, "User:bob", "*", kmsg.ACLOperationDelete, kmsg.ACLPermissionTypeAllow},
	{kmsg.ACLResourceTypeTopic, "m-orders", kmsg.ACLResourcePatternTypeLiteral, "User:*", "*", kmsg.ACLOperationAlterConfigs, kmsg.ACLPermissionTypeAllow},
	{kmsg.ACLResourceTypeTopic, "m-pay-in", kmsg.ACLResourcePatternTypeLiteral, "User:carol", "10.9.9.9", kmsg.ACLOperationAll, kmsg.ACLPermissionTypeAllow},
	// CreateTopics of m-new: bob may create it but not describe its configs, carol both.
	{kmsg.ACLResourceTypeTopic, "m-new", kmsg.ACLResourcePatternTypeLiteral, "User:bob", "*", kmsg.ACLOperationCreate, kmsg.ACLPermissionTypeAllow},
	{kmsg.ACLResourceTypeTopic, "m-new", kmsg.ACLResourcePatternTypeLiteral, "User:carol", "*", kmsg.ACLOperationCreate, kmsg.ACLPermissionTypeAllow},
	{kmsg.ACLResourceTypeTopic, "m-new", kmsg.ACLResourcePatternTypeLiteral, "User:carol", "*", kmsg.ACLOperationDescribeConfigs, kmsg.ACLPermissionTypeAllow},
	{kmsg.ACLResourceTypeGroup, "g-", kmsg.ACLResourcePatternTypePrefixed, "User:alice", "*", kmsg.ACLOperationRead, kmsg.ACLPermissionTypeAllow},
	{kmsg.ACLResourceTypeGroup, "g-bob", kmsg.ACLResourcePatternTypeLiteral, "User:bob", "*", kmsg.ACLOperationDescribe, kmsg.ACLPermissionTypeAllow},
	{kmsg.ACLResourceTypeGroup, "g-del", kmsg.ACLResourcePatternTypeLiteral, "User:bob", "*", kmsg.ACLOperationDelete, kmsg.ACLPermissionTypeAllow},
	{kmsg.ACLResourceTypeTransactionalId, "tx-a", kmsg.ACLResourcePatternTypeLiteral, "User:alice", "*", kmsg.ACLOperationWrite, kmsg.ACLPermissionTypeAllow},
	{kmsg.ACLResourceTypeTransactionalId, "tx-", kmsg.ACLResourcePatternTypePrefixed, "User:bob", "*", kmsg.ACLOperationDescribe, kmsg.ACLPermissionTypeAllow},
	{kmsg.ACLResourceTypeCluster, "kafka-cluster", kmsg.ACLResourcePatternTypeLiteral, "User:bob", "*", kmsg.ACLOperationDescribe, kmsg.ACLPermissionTypeAllow},
	{kmsg.ACLResourceTypeCluster, "kafka-cluster", kmsg.ACLResourcePatternTypeLiteral, "User:bob", "*", kmsg.ACLOperationIdempotentWrite, kmsg.ACLPermissionTypeAllow},
	{kmsg.ACLResourceTypeCluster, "kafka-cluster", kmsg.ACLResourcePatternTypeLiteral, "User:carol", "*", kmsg.ACLOperationAlter, kmsg.ACLPermissionTypeAllow},
}

func aclFail(what string, err error) {
	fmt.Fprintf(os.Stderr, "acl matrix: %s: %v\n", what, err)
	os.Exit(1)
}

// oneRecord is a record batch of one record, value "v".
func oneRecord() []byte {
	record := []byte{0x0e, 0, 0, 0, 0x01, 0x02, 'v', 0}
	b := make([]byte, 61, 61+len(record))
	now := time.Now().UnixMilli()
	binary.BigEndian.PutUint64(b[0:], 0)
	binary.BigEndian.PutUint32(b[8:], uint32(49+len(record)))
	binary.BigEndian.PutUint32(b[12:], 0xffffffff)
	b[16] = 2
	binary.BigEndian.PutUint16(b[21:], 0)
	binary.BigEndian.PutUint32(b[23:], 0)
	binary.BigEndian.PutUint64(b[27:], uint64(now))
	binary.BigEndian.PutUint64(b[35:], uint64(now))
	binary.BigEndian.PutUint64(b[43:], 0xffffffffffffffff)
	binary.BigEndian.PutUint16(b[51:], 0xffff)
	binary.BigEndian.PutUint32(b[53:], 0xffffffff)
	binary.BigEndian.PutUint32(b[57:], 1)
	b = append(b, record...)
	crc := crc32.Checksum(b[21:], crc32.MakeTable(crc32.Castagnoli))
	binary.BigEndian.PutUint32(b[17:], crc)
	return b
}

func aclMatrix(adminBoot, saslBoot string) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	admin, err := kgo.NewClient(kgo.SeedBrokers(adminBoot))
	if err != nil {
		aclFail("admin client", err)
	}
	defer admin.Close()
	create := kmsg.NewPtrCreateTopicsRequest()
	create.TimeoutMillis = 30000
	for _, t := range matrixTopics {
		ct := kmsg.NewCreateTopicsRequestTopic()
		ct.Topic, ct.NumPartitions, ct.ReplicationFactor = t, 1, 1
		create.Topics = append(create.Topics, ct)
	}
	if _, err := create.RequestWith(ctx, admin); err != nil {
		aclFail("create topics", err)
	}
	acls := kmsg.NewPtrCreateACLsRequest()
	for _, a := range matrixACLs {
		c := kmsg.NewCreateACLsRequestCreation()
		c.ResourceType, c.ResourceName, c.ResourcePatternType = a.rt, a.name, a.pattern
		c.Principal, c.Host, c.Operation, c.PermissionType = a.who, a.host, a.op, a.perm
		acls.Creations = append(acls.Creations, c)
	}
	created, err := acls.RequestWith(ctx, admin)
	if err != nil {
		aclFail("create acls", err)
	}
	for i, r := range created.Results {
		if r.ErrorCode != 0 {
			aclFail("create acls", fmt.Errorf("acl %d: error %d", i, r.ErrorCode))
		}
	}
	// The ids of the topics, for the requests that name topics by id.
	meta := kmsg.NewPtrMetadataRequest()
	for _, t := range matrixTopics {
		mt := kmsg.NewMetadataRequestTopic()
		mt.Topic = kmsg.StringPtr(t)
		meta.Topics = append(meta.Topics, mt)
	}
	m, err := meta.RequestWith(ctx, admin)
	if err != nil {
		aclFail("metadata", err)
	}
	ids := map[string][16]byte{}
	node := int32(-1)
	for _, t := range m.Topics {
		ids[*t.Topic] = t.TopicID
	}
	for _, b := range m.Brokers {
		node = b.NodeID
	}
	// The group and transaction coordinators' topics exist and are loaded before the
	// principals ask (the first request for each would otherwise answer a retriable
	// error while the topic is created, on either broker).
	warm(ctx, admin)
	var lines []string
	for _, who := range []string{"alice", "bob", "carol"} {
		cl, err := kgo.NewClient(
			kgo.SeedBrokers(saslBoot),
			kgo.SASL(plain.Auth{User: who, Pass: who + "-secret"}.AsMechanism()),
		)
		if err != nil {
			aclFail("client "+who, err)
		}
		lines = append(lines, matrixFor(ctx, cl.Broker(int(node)), who, ids)...)
		cl.Close()
	}
	sort.Strings(lines)
	fmt.Println(strings.Join(lines, "\n"))
}

// topicName is a response's topic: its name, or (from versions naming topics by id) the
// name of its id.
func topicName(name string, id [16]byte, ids map[string][16]byte) string {
	if name != "" {
		return name
	}
	for n, i := range ids {
		if i == id {
			return n
		}
	}
	return fmt.Sprintf("%x", id)
}

func warm(ctx context.Context, admin *kgo.Client) {
	for start := time.Now(); ; time.Sleep(500 * time.Millisecond) {
		ip := kmsg.NewPtrInitProducerIDRequest()
		ip.TransactionalID = kmsg.StringPtr("tx-warm")
		ip.TransactionTimeoutMillis, ip.ProducerID, ip.ProducerEpoch = 60000, -1, -1
		r, err := ip.RequestWith(ctx, admin)
		fc := kmsg.NewPtrFindCoordinatorRequest()
		fc.CoordinatorKey, fc.CoordinatorKeys = "g-warm", []string{"g-warm"}
		c, cerr := fc.RequestWith(ctx, admin)
		// Each group the matrix names lives on its own __consumer_offsets partition, which
		// a loaded broker may still be loading: every one must answer DescribeGroups
		// without a coordinator error (14, 15, 16) first.
		dg := kmsg.NewPtrDescribeGroupsRequest()
		dg.Groups = []string{"g-a", "g-bob", "g-del", "other", "g-share"}
		d, derr := dg.RequestWith(ctx, admin)
		loaded := derr == nil
		if loaded {
			for _, g := range d.Groups {
				loaded = loaded && g.ErrorCode != 14 && g.ErrorCode != 15 && g.ErrorCode != 16
			}
		}
		if err == nil && r.ErrorCode == 0 && cerr == nil && c.ErrorCode == 0 &&
			(len(c.Coordinators) == 0 || c.Coordinators[0].ErrorCode == 0) && loaded {
			return
		}
		if time.Since(start) > time.Minute {
			aclFail("coordinators", fmt.Errorf("not ready: %v %v", err, cerr))
		}
	}
}

func matrixFor(ctx context.Context, b *kgo.Broker, who string, ids map[string][16]byte) []string {
	var out []string
	say := func(req, target string, code int16) {
		out = append(out, fmt.Sprintf("%s %s %s %d", who, req, target, code))
	}
	ask := func(req kmsg.Request) kmsg.Response {
		r, err := b.Request(ctx, req)
		if err != nil {
			aclFail(fmt.Sprintf("%s %T", who, req), err)
		}
		return r
	}
	for _, t := range matrixTopics {
		p := kmsg.NewPtrProduceRequest()
		p.Acks, p.TimeoutMillis = 1, 10000
		pt := kmsg.NewProduceRequestTopic()
		pt.Topic, pt.TopicID = t, ids[t]
		pp := kmsg.NewProduceRequestTopicPartition()
		pp.Records = oneRecord()
		pt.Partitions = append(pt.Partitions, pp)
		p.Topics = append(p.Topics, pt)
		pr := ask(p).(*kmsg.ProduceResponse)
		say("produce", t, pr.Topics[0].Partitions[0].ErrorCode)

		f := kmsg.NewPtrFetchRequest()
		f.ReplicaID, f.MaxBytes, f.SessionEpoch = -1, 1<<20, -1
		ft := kmsg.NewFetchRequestTopic()
		ft.Topic, ft.TopicID = t, ids[t]
		fp := kmsg.NewFetchRequestTopicPartition()
		fp.PartitionMaxBytes, fp.CurrentLeaderEpoch, fp.LastFetchedEpoch = 1<<20, -1, -1
		ft.Partitions = append(ft.Partitions, fp)
		f.Topics = append(f.Topics, ft)
		fr := ask(f).(*kmsg.FetchResponse)
		say("fetch", t, fr.Topics[0].Partitions[0].ErrorCode)

		lo := kmsg.NewPtrListOffsetsRequest()
		lo.ReplicaID = -1
		lt := kmsg.NewListOffsetsRequestTopic()
		lt.Topic = t
		lp := kmsg.NewListOffsetsRequestTopicPartition()
		lp.Timestamp, lp.CurrentLeaderEpoch = -1, -1
		lt.Partitions = append(lt.Partitions, lp)
		lo.Topics = append(lo.Topics, lt)
		lr := ask(lo).(*kmsg.ListOffsetsResponse)
		say("list-offsets", t, lr.Topics[0].Partitions[0].ErrorCode)

		dc := kmsg.NewPtrDescribeConfigsRequest()
		dr := kmsg.NewDescribeConfigsRequestResource()
		dr.ResourceType, dr.ResourceName = kmsg.ConfigResourceTypeTopic, t
		dc.Resources = append(dc.Resources, dr)
		say("describe-configs", t, ask(dc).(*kmsg.DescribeConfigsResponse).Resources[0].ErrorCode)

		ia := kmsg.NewPtrIncrementalAlterConfigsRequest()
		ia.ValidateOnly = true
		ir := kmsg.NewIncrementalAlterConfigsRequestResource()
		ir.ResourceType, ir.ResourceName = kmsg.ConfigResourceTypeTopic, t
		ic := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		ic.Name, ic.Value = "retention.ms", kmsg.StringPtr("3600000")
		ir.Configs = append(ir.Configs, ic)
		ia.Resources = append(ia.Resources, ir)
		say("alter-configs", t, ask(ia).(*kmsg.IncrementalAlterConfigsResponse).Resources[0].ErrorCode)

		cp := kmsg.NewPtrCreatePartitionsRequest()
		cp.ValidateOnly, cp.TimeoutMillis = true, 10000
		cpt := kmsg.NewCreatePartitionsRequestTopic()
		cpt.Topic, cpt.Count = t, 2
		cp.Topics = append(cp.Topics, cpt)
		say("create-partitions", t, ask(cp).(*kmsg.CreatePartitionsResponse).Topics[0].ErrorCode)

		dp := kmsg.NewPtrDescribeProducersRequest()
		dpt := kmsg.NewDescribeProducersRequestTopic()
		dpt.Topic, dpt.Partitions = t, []int32{0}
		dp.Topics = append(dp.Topics, dpt)
		say("describe-producers", t, ask(dp).(*kmsg.DescribeProducersResponse).Topics[0].Partitions[0].ErrorCode)

		md := kmsg.NewPtrMetadataRequest()
		mt := kmsg.NewMetadataRequestTopic()
		mt.Topic = kmsg.StringPtr(t)
		md.Topics = append(md.Topics, mt)
		say("metadata", t, ask(md).(*kmsg.MetadataResponse).Topics[0].ErrorCode)
	}
	// Metadata of every topic: the names the principal may describe.
	all := ask(kmsg.NewPtrMetadataRequest()).(*kmsg.MetadataResponse)
	var names []string
	for _, t := range all.Topics {
		if t.Topic != nil && strings.HasPrefix(*t.Topic, "m-") {
			names = append(names, *t.Topic)
		}
	}
	sort.Strings(names)
	out = append(out, fmt.Sprintf("%s metadata-all %s", who, strings.Join(names, ",")))
	// Auto-creation and CreateTopics of a new topic.
	md := kmsg.NewPtrMetadataRequest()
	md.AllowAutoTopicCreation = true
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr("m-pay-new-" + who)
	md.Topics = append(md.Topics, mt)
	say("metadata-create", "m-pay-new", ask(md).(*kmsg.MetadataResponse).Topics[0].ErrorCode)
	ct := kmsg.NewPtrCreateTopicsRequest()
	ct.TimeoutMillis, ct.ValidateOnly = 10000, true
	ctt := kmsg.NewCreateTopicsRequestTopic()
	ctt.Topic, ctt.NumPartitions, ctt.ReplicationFactor = "m-new", 1, 1
	ct.Topics = append(ct.Topics, ctt)
	cr := ask(ct).(*kmsg.CreateTopicsResponse).Topics[0]
	say("create-topics", "m-new", cr.ErrorCode)
	// Without DESCRIBE_CONFIGS on the topic, Kafka leaves out its configs, partitions
	// and replication factor and sets the config error instead.
	say("create-topics-config", "m-new", cr.ConfigErrorCode)
	say("create-topics-partitions", "m-new", int16(cr.NumPartitions))
	withConfigs := int16(0)
	if len(cr.Configs) > 0 {
		withConfigs = 1
	}
	say("create-topics-with-configs", "m-new", withConfigs)

	for _, g := range []string{"g-a", "g-bob", "g-del", "other"} {
		fc := kmsg.NewPtrFindCoordinatorRequest()
		fc.CoordinatorKey, fc.CoordinatorKeys = g, []string{g}
		fr := ask(fc).(*kmsg.FindCoordinatorResponse)
		code := fr.ErrorCode
		if len(fr.Coordinators) > 0 {
			code = fr.Coordinators[0].ErrorCode
		}
		say("find-coordinator", g, code)

		j := kmsg.NewPtrJoinGroupRequest()
		j.Group, j.SessionTimeoutMillis, j.RebalanceTimeoutMillis, j.ProtocolType = g, 10000, 10000, "consumer"
		jp := kmsg.NewJoinGroupRequestProtocol()
		jp.Name, jp.Metadata = "range", []byte{0, 0, 0, 0, 0, 0, 0, 0}
		j.Protocols = append(j.Protocols, jp)
		say("join-group", g, ask(j).(*kmsg.JoinGroupResponse).ErrorCode)

		hb := kmsg.NewPtrHeartbeatRequest()
		hb.Group, hb.MemberID, hb.Generation = g, "nobody", 1
		say("heartbeat", g, ask(hb).(*kmsg.HeartbeatResponse).ErrorCode)

		dg := kmsg.NewPtrDescribeGroupsRequest()
		dg.Groups = []string{g}
		say("describe-groups", g, ask(dg).(*kmsg.DescribeGroupsResponse).Groups[0].ErrorCode)

		oc := kmsg.NewPtrOffsetCommitRequest()
		oc.Group, oc.Generation, oc.MemberID = g, -1, ""
		committed := []string{"m-pay-in", "m-orders"}
		for _, t := range committed {
			oct := kmsg.NewOffsetCommitRequestTopic()
			oct.Topic, oct.TopicID = t, ids[t]
			ocp := kmsg.NewOffsetCommitRequestTopicPartition()
			ocp.Offset, ocp.LeaderEpoch = 0, -1
			oct.Partitions = append(oct.Partitions, ocp)
			oc.Topics = append(oc.Topics, oct)
		}
		ocr := ask(oc).(*kmsg.OffsetCommitResponse)
		for _, t := range ocr.Topics {
			say("offset-commit", g+"/"+topicName(t.Topic, t.TopicID, ids), t.Partitions[0].ErrorCode)
		}

		of := kmsg.NewPtrOffsetFetchRequest()
		ofg := kmsg.NewOffsetFetchRequestGroup()
		ofg.Group = g
		oft := kmsg.NewOffsetFetchRequestGroupTopic()
		oft.Topic, oft.TopicID, oft.Partitions = "m-pay-in", ids["m-pay-in"], []int32{0}
		ofg.Topics = append(ofg.Topics, oft)
		of.Groups = append(of.Groups, ofg)
		of.Group = g
		oft0 := kmsg.NewOffsetFetchRequestTopic()
		oft0.Topic, oft0.Partitions = "m-pay-in", []int32{0}
		of.Topics = append(of.Topics, oft0)
		ofr := ask(of).(*kmsg.OffsetFetchResponse)
		code = ofr.ErrorCode
		if len(ofr.Groups) > 0 {
			code = ofr.Groups[0].ErrorCode
		}
		say("offset-fetch", g, code)

		od := kmsg.NewPtrOffsetDeleteRequest()
		od.Group = g
		odt := kmsg.NewOffsetDeleteRequestTopic()
		odt.Topic = "m-pay-in"
		odp := kmsg.NewOffsetDeleteRequestTopicPartition()
		odt.Partitions = append(odt.Partitions, odp)
		od.Topics = append(od.Topics, odt)
		say("offset-delete", g, ask(od).(*kmsg.OffsetDeleteResponse).ErrorCode)
	}
	lg := ask(kmsg.NewPtrListGroupsRequest()).(*kmsg.ListGroupsResponse)
	var groups []string
	for _, g := range lg.Groups {
		groups = append(groups, g.Group)
	}
	sort.Strings(groups)
	out = append(out, fmt.Sprintf("%s list-groups %d %s", who, lg.ErrorCode, strings.Join(groups, ",")))

	for _, id := range []string{"", "tx-a", "tx-b"} {
		ip := kmsg.NewPtrInitProducerIDRequest()
		ip.TransactionTimeoutMillis, ip.ProducerID, ip.ProducerEpoch = 60000, -1, -1
		if id != "" {
			ip.TransactionalID = kmsg.StringPtr(id)
		}
		say("init-producer-id", "<"+id+">", ask(ip).(*kmsg.InitProducerIDResponse).ErrorCode)
	}
	dt := kmsg.NewPtrDescribeTransactionsRequest()
	dt.TransactionalIDs = []string{"tx-a"}
	say("describe-transactions", "tx-a", ask(dt).(*kmsg.DescribeTransactionsResponse).TransactionStates[0].ErrorCode)

	da := kmsg.NewPtrDescribeACLsRequest()
	da.ResourceType, da.ResourcePatternType = kmsg.ACLResourceTypeAny, kmsg.ACLResourcePatternTypeAny
	da.Operation, da.PermissionType = kmsg.ACLOperationAny, kmsg.ACLPermissionTypeAny
	dar := ask(da).(*kmsg.DescribeACLsResponse)
	n := 0
	for _, r := range dar.Resources {
		n += len(r.ACLs)
	}
	say("describe-acls", fmt.Sprintf("count=%d", n), dar.ErrorCode)
	ca := kmsg.NewPtrCreateACLsRequest()
	cc := kmsg.NewCreateACLsRequestCreation()
	cc.ResourceType, cc.ResourceName, cc.ResourcePatternType = kmsg.ACLResourceTypeTopic, "m-"+who, kmsg.ACLResourcePatternTypeLiteral
	cc.Principal, cc.Host, cc.Operation, cc.PermissionType = "User:"+who, "*", kmsg.ACLOperationRead, kmsg.ACLPermissionTypeAllow
	ca.Creations = append(ca.Creations, cc)
	say("create-acls", "m-"+who, ask(ca).(*kmsg.CreateACLsResponse).Results[0].ErrorCode)

	dl := ask(kmsg.NewPtrDescribeLogDirsRequest()).(*kmsg.DescribeLogDirsResponse)
	say("describe-log-dirs", "all", dl.ErrorCode)
	bc := kmsg.NewPtrDescribeConfigsRequest()
	bcr := kmsg.NewDescribeConfigsRequestResource()
	bcr.ResourceType, bcr.ResourceName = kmsg.ConfigResourceTypeBroker, ""
	bc.Resources = append(bc.Resources, bcr)
	say("describe-configs", "broker", ask(bc).(*kmsg.DescribeConfigsResponse).Resources[0].ErrorCode)
	cq := kmsg.NewPtrDescribeClientQuotasRequest()
	say("describe-client-quotas", "all", ask(cq).(*kmsg.DescribeClientQuotasResponse).ErrorCode)
	aq := kmsg.NewPtrAlterClientQuotasRequest()
	aqe := kmsg.NewAlterClientQuotasRequestEntry()
	aqEntity := kmsg.NewAlterClientQuotasRequestEntryEntity()
	aqEntity.Type, aqEntity.Name = "user", kmsg.StringPtr("q-"+who)
	aqOp := kmsg.NewAlterClientQuotasRequestEntryOp()
	aqOp.Key, aqOp.Value = "producer_byte_rate", 1024
	aqe.Entity, aqe.Ops = append(aqe.Entity, aqEntity), append(aqe.Ops, aqOp)
	aq.Entries, aq.ValidateOnly = append(aq.Entries, aqe), true
	say("alter-client-quotas", "validate-only", ask(aq).(*kmsg.AlterClientQuotasResponse).Entries[0].ErrorCode)
	lpr := ask(kmsg.NewPtrListPartitionReassignmentsRequest()).(*kmsg.ListPartitionReassignmentsResponse)
	say("list-reassignments", "all", lpr.ErrorCode)

	shareMatrix(ask, say, ids)

	// Destructive ones last: only the principals allowed change anything, and both
	// brokers see the same sequence.
	dg := kmsg.NewPtrDeleteGroupsRequest()
	dg.Groups = []string{"g-del"}
	say("delete-groups", "g-del", ask(dg).(*kmsg.DeleteGroupsResponse).Groups[0].ErrorCode)
	drr := kmsg.NewPtrDeleteRecordsRequest()
	drr.TimeoutMillis = 10000
	drt := kmsg.NewDeleteRecordsRequestTopic()
	drt.Topic = "m-hidden"
	drp := kmsg.NewDeleteRecordsRequestTopicPartition()
	drp.Offset = 0
	drt.Partitions = append(drt.Partitions, drp)
	drr.Topics = append(drr.Topics, drt)
	say("delete-records", "m-hidden", ask(drr).(*kmsg.DeleteRecordsResponse).Topics[0].Partitions[0].ErrorCode)
	return out
}

// shareMatrix asks the share-group offset APIs (KIP-932's admin side) and a share state
// API, which only brokers (CLUSTER_ACTION) may call. Answers are listed by group, topic
// and partition, not position.
func shareMatrix(ask func(kmsg.Request) kmsg.Response, say func(string, string, int16), ids map[string][16]byte) {
	shareTopics := []string{"m-orders", "m-pay-in", "m-pay-secret"}
	for _, g := range []string{"g-share", "g-bob"} {
		d := kmsg.NewPtrDescribeShareGroupOffsetsRequest()
		dg := kmsg.NewDescribeShareGroupOffsetsRequestGroup()
		dg.GroupID = g
		for _, t := range shareTopics {
			dt := kmsg.NewDescribeShareGroupOffsetsRequestGroupTopic()
			dt.Topic, dt.Partitions = t, []int32{0}
			dg.Topics = append(dg.Topics, dt)
		}
		d.Groups = append(d.Groups, dg)
		all := kmsg.NewDescribeShareGroupOffsetsRequestGroup()
		all.GroupID = g + "-all"
		d.Groups = append(d.Groups, all)
		dr := ask(d).(*kmsg.DescribeShareGroupOffsetsResponse)
		for _, rg := range dr.Groups {
			say("describe-share-offsets", rg.GroupID, rg.ErrorCode)
			for _, rt := range rg.Topics {
				for _, rp := range rt.Partitions {
					say("describe-share-offsets", rg.GroupID+"/"+topicName(rt.Topic, rt.TopicID, ids), rp.ErrorCode)
				}
			}
		}
	}
	a := kmsg.NewPtrAlterShareGroupOffsetsRequest()
	a.GroupID = "g-share"
	for _, t := range shareTopics {
		at := kmsg.NewAlterShareGroupOffsetsRequestTopic()
		at.Topic = t
		ap := kmsg.NewAlterShareGroupOffsetsRequestTopicPartition()
		at.Partitions = append(at.Partitions, ap)
		a.Topics = append(a.Topics, at)
	}
	ar := ask(a).(*kmsg.AlterShareGroupOffsetsResponse)
	say("alter-share-offsets", "g-share", ar.ErrorCode)
	for _, rt := range ar.Topics {
		for _, rp := range rt.Partitions {
			say("alter-share-offsets", "g-share/"+topicName(rt.Topic, rt.TopicID, ids), rp.ErrorCode)
		}
	}
	for _, g := range []string{"g-share", "g-del"} {
		del := kmsg.NewPtrDeleteShareGroupOffsetsRequest()
		del.GroupID = g
		for _, t := range shareTopics {
			dt := kmsg.NewDeleteShareGroupOffsetsRequestTopic()
			dt.Topic = t
			del.Topics = append(del.Topics, dt)
		}
		dr := ask(del).(*kmsg.DeleteShareGroupOffsetsResponse)
		say("delete-share-offsets", g, dr.ErrorCode)
		for _, rt := range dr.Topics {
			say("delete-share-offsets", g+"/"+topicName(rt.Topic, rt.TopicID, ids), rt.ErrorCode)
		}
	}
	is := kmsg.NewPtrInitializeShareGroupStateRequest()
	is.GroupID = "g-share"
	it := kmsg.NewInitializeShareGroupStateRequestTopic()
	it.TopicID = ids["m-orders"]
	ip := kmsg.NewInitializeShareGroupStateRequestTopicPartition()
	it.Partitions = append(it.Partitions, ip)
	is.Topics = append(is.Topics, it)
	ir := ask(is).(*kmsg.InitializeShareGroupStateResponse)
	for _, rt := range ir.Topics {
		for _, rp := range rt.Partitions {
			say("initialize-share-state", "g-share/"+topicName("", rt.TopicID, ids), rp.ErrorCode)
		}
	}
}
