// Consumer-group checks with franz-go (the client behind Redpanda Console) against a
// Kafka-compatible broker:
//
//	go run . -bootstrap 127.0.0.1:9092
//
// 1. kadm creates a 3-partition topic; an idempotent producer writes 300 keyed records.
// 2. Consumer A joins a group, reads 150 records, commits exactly those, and leaves.
// 3. Consumers B and C join the same group together and read on from the committed
//    offsets: A+B+C together must see every record exactly once, and B and C must
//    split the partitions.
// 4. kadm: the group is listed, described (Empty after everyone left), its committed
//    offsets equal the end offsets (lag 0), and it can be deleted.
// 5. Exactly once (eos.go): GroupTransactSession members copy a topic, one is killed
//    mid-run and restarted; read_committed, the copy equals the input.
// 6. Share groups (share.go, KIP-932): two share consumers of one group accept, release
//    and reject records of a topic written before the group (share.auto.offset.reset set
//    as a group config); each record is finished exactly once.
//
// With -sasl-admin, it runs the SCRAM checks of sasl.go instead, and with -acl-admin it
// prints the ACL matrix of acls.go (both for compat-tests/security).
//
// Prints "PASS name" / "FAIL name: reason" lines, then exactly one line
// "franz-go: N passed, M failed"; exits non-zero if M > 0.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

const records = 300

var passed, failed int

func check(name string, err error) bool {
	if err != nil {
		fmt.Printf("FAIL %s: %v\n", name, err)
		failed++
		return false
	}
	fmt.Printf("PASS %s\n", name)
	passed++
	return true
}

func finish() {
	fmt.Printf("franz-go: %d passed, %d failed\n", passed, failed)
	if failed > 0 {
		os.Exit(1)
	}
	os.Exit(0)
}

// consumer is one group member; seen collects "partition/offset" -> value.
type consumer struct {
	cl         *kgo.Client
	partitions map[int32]bool
	seen       map[string]string
}

func newConsumer(boot, group, topic string) (*consumer, error) {
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(boot),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(),
		kgo.FetchMaxWait(500*time.Millisecond),
		kgo.SessionTimeout(10*time.Second),
	)
	if err != nil {
		return nil, err
	}
	return &consumer{cl: cl, partitions: map[int32]bool{}, seen: map[string]string{}}, nil
}

// poll reads until `want` records arrived (want < 0: until `idle` passes without any),
// committing exactly the records it processed.
func (c *consumer) poll(ctx context.Context, want int, idle time.Duration) error {
	got := 0
	for want < 0 || got < want {
		pctx, cancel := context.WithTimeout(ctx, idle)
		max := 50
		if want >= 0 && want-got < max {
			max = want - got
		}
		fetches := c.cl.PollRecords(pctx, max)
		cancel()
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("gave up after %d records: %w", got, err)
		}
		var recs []*kgo.Record
		fetches.EachError(func(t string, p int32, err error) {
			if err != context.DeadlineExceeded && err != context.Canceled {
				fmt.Fprintf(os.Stderr, "fetch error %s/%d: %v\n", t, p, err)
			}
		})
		fetches.EachRecord(func(r *kgo.Record) { recs = append(recs, r) })
		if len(recs) == 0 {
			if want < 0 {
				return nil
			}
			continue
		}
		for _, r := range recs {
			c.partitions[r.Partition] = true
			c.seen[fmt.Sprintf("%d/%d", r.Partition, r.Offset)] = string(r.Value)
		}
		if err := c.cl.CommitRecords(ctx, recs...); err != nil {
			return fmt.Errorf("commit: %w", err)
		}
		got += len(recs)
	}
	return nil
}

func main() {
	boot := flag.String("bootstrap", "127.0.0.1:9092", "broker address")
	eosID := flag.String("eos-member", "", "run as a member of the exactly-once check with this transactional id")
	eosIn := flag.String("eos-in", "", "the exactly-once member's input topic")
	eosOut := flag.String("eos-out", "", "the exactly-once member's output topic")
	eosGroup := flag.String("eos-group", "", "the exactly-once member's group")
	saslAdmin := flag.String("sasl-admin", "", "run the SCRAM checks (sasl.go) instead, making users through this PLAINTEXT address")
	saslBoot := flag.String("sasl-bootstrap", "", "the SCRAM checks' SASL listener")
	saslCA := flag.String("sasl-ca", "", "the CA of a SASL_SSL listener (TLS when set)")
	aclAdmin := flag.String("acl-admin", "", "print the ACL matrix (acls.go) instead, setting up through this super user's PLAINTEXT address")
	aclSASL := flag.String("acl-sasl", "", "the ACL matrix's SASL_PLAINTEXT listener (PLAIN users alice, bob, carol)")
	flag.Parse()
	if *aclAdmin != "" {
		aclMatrix(*aclAdmin, *aclSASL)
		return
	}
	if *saslAdmin != "" {
		saslChecks(*saslAdmin, *saslBoot, *saslCA)
	}
	if *eosID != "" {
		if err := eosMember(*boot, *eosIn, *eosOut, *eosGroup, *eosID, 20*time.Second); err != nil {
			fmt.Fprintf(os.Stderr, "eos member %s: %v\n", *eosID, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	run := time.Now().UnixNano()
	topic := fmt.Sprintf("franz-go-%d", run)
	group := fmt.Sprintf("franz-go-group-%d", run)

	admin, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(*boot, ",")...))
	if !check("client", err) {
		finish()
	}
	defer admin.Close()
	adm := kadm.NewClient(admin)

	// 1. topic and records
	created, err := adm.CreateTopics(ctx, 3, 1, nil, topic)
	if err == nil {
		err = created.Error()
	}
	if !check("create-topic", err) {
		finish()
	}
	var produced []*kgo.Record
	for i := 0; i < records; i++ {
		produced = append(produced, &kgo.Record{
			Topic: topic,
			Key:   []byte(fmt.Sprintf("k%d", i%31)),
			Value: []byte(fmt.Sprintf("v%d", i)),
		})
	}
	err = admin.ProduceSync(ctx, produced...).FirstErr()
	if !check("produce-idempotent", err) {
		finish()
	}

	// 2. A reads half, commits exactly that, leaves
	a, err := newConsumer(*boot, group, topic)
	if err == nil {
		err = a.poll(ctx, records/2, 20*time.Second)
	}
	if a != nil {
		a.cl.Close() // leaves the group
	}
	check("group-consume-and-commit", err)

	// 3. B and C continue from the committed offsets and split the partitions
	var b, c *consumer
	if err == nil {
		b, err = newConsumer(*boot, group, topic)
	}
	if err == nil {
		c, err = newConsumer(*boot, group, topic)
	}
	if err == nil {
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i, m := range []*consumer{b, c} {
			wg.Add(1)
			go func(i int, m *consumer) {
				defer wg.Done()
				// read until quiet: 8 s without records after both joined
				errs[i] = m.poll(ctx, -1, 8*time.Second)
			}(i, m)
		}
		wg.Wait()
		if errs[0] != nil {
			err = errs[0]
		} else {
			err = errs[1]
		}
	}
	if err == nil {
		all := map[string]string{}
		dups := 0
		for _, m := range []*consumer{a, b, c} {
			for k, v := range m.seen {
				if _, ok := all[k]; ok {
					dups++
				}
				all[k] = v
			}
		}
		values := map[string]bool{}
		for _, v := range all {
			values[v] = true
		}
		switch {
		case dups > 0:
			err = fmt.Errorf("%d records read twice across the group's members", dups)
		case len(values) != records:
			err = fmt.Errorf("read %d distinct records, want %d", len(values), records)
		}
	}
	check("group-resume-from-committed", err)
	if err == nil {
		var bp, cp []int
		overlap := false
		for p := range b.partitions {
			bp = append(bp, int(p))
		}
		for p := range c.partitions {
			cp = append(cp, int(p))
			if b.partitions[p] {
				overlap = true
			}
		}
		sort.Ints(bp)
		sort.Ints(cp)
		if len(bp) == 0 || len(cp) == 0 || overlap {
			// Both joined before reading; a member may legitimately have got partitions
			// with nothing left to read, so only an overlap is a hard failure.
			if overlap {
				err = fmt.Errorf("partitions read by both members: %v / %v", bp, cp)
			}
		}
		check("group-members-split-partitions", err)
	}
	for _, m := range []*consumer{b, c} {
		if m != nil {
			m.cl.Close()
		}
	}

	// 4. administration
	listed, err := adm.ListGroups(ctx)
	if err == nil {
		if _, ok := listed[group]; !ok {
			err = fmt.Errorf("group %s not in %v", group, listed.Groups())
		}
	}
	check("admin-list-groups", err)

	described, err := adm.DescribeGroups(ctx, group)
	if err == nil {
		d := described[group]
		if d.Err != nil {
			err = d.Err
		} else if d.State != "Empty" || len(d.Members) != 0 {
			err = fmt.Errorf("state %q with %d members, want Empty with none", d.State, len(d.Members))
		}
	}
	check("admin-describe-group", err)

	offsets, err := adm.FetchOffsets(ctx, group)
	var ends kadm.ListedOffsets
	if err == nil {
		ends, err = adm.ListEndOffsets(ctx, topic)
	}
	if err == nil {
		ends.Each(func(lo kadm.ListedOffset) {
			committed, ok := offsets.Lookup(lo.Topic, lo.Partition)
			switch {
			case err != nil:
			case lo.Err != nil:
				err = lo.Err
			case lo.Offset == 0 && !ok:
			case !ok:
				err = fmt.Errorf("partition %d: nothing committed, end offset %d", lo.Partition, lo.Offset)
			case committed.At != lo.Offset:
				err = fmt.Errorf("partition %d: committed %d, end offset %d", lo.Partition, committed.At, lo.Offset)
			}
		})
	}
	check("admin-committed-equals-end-offsets", err)

	deleted, err := adm.DeleteGroups(ctx, group)
	if err == nil {
		err = deleted.Error()
	}
	check("admin-delete-group", err)

	// 5. exactly once
	check("eos-group-transact-session-member-killed", checkEOS(ctx, *boot, adm, run))

	// 6. share groups
	check("share-group-consumers", checkShare(ctx, *boot, admin, adm, run))
	finish()
}
