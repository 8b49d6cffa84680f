// Exactly-once with franz-go's GroupTransactSession: consume, transform, produce and commit
// the consumed offsets in one transaction, with a member killed mid-run.
//
// The check writes eosRecords records to an input topic, then runs two member processes
// (this binary with -eos-member) in one group, each with its own transactional id. Once
// the first member has committed some transactions it is killed with SIGKILL (its
// transaction is left open) and started again with the same transactional id, which
// fences the dead instance and aborts what it left. When the members have drained the
// input, a read_committed consumer reads the output: it must hold every input record
// transformed, exactly once, in its partition's order.
package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

const eosRecords = 3000

// eosMember is one member of the copying group; it prints "committed N" after every
// committed transaction and exits once the input has been quiet for `idle`.
func eosMember(boot, in, out, group, txnID string, idle time.Duration) error {
	sess, err := kgo.NewGroupTransactSession(
		kgo.SeedBrokers(strings.Split(boot, ",")...),
		kgo.TransactionalID(txnID),
		kgo.TransactionTimeout(10*time.Second),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.RequireStableFetchOffsets(),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(in),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.SessionTimeout(6*time.Second),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
	)
	if err != nil {
		return err
	}
	defer sess.Close()
	ctx := context.Background()
	committed := 0
	quietSince := time.Now()
	for time.Since(quietSince) < idle {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		fetches := sess.PollRecords(pctx, 50)
		cancel()
		var recs []*kgo.Record
		fetches.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
				fmt.Fprintf(os.Stderr, "fetch error %s/%d: %v\n", t, p, err)
			}
		})
		fetches.EachRecord(func(r *kgo.Record) { recs = append(recs, r) })
		if len(recs) == 0 {
			continue
		}
		quietSince = time.Now()
		if err := sess.Begin(); err != nil {
			return fmt.Errorf("begin: %w", err)
		}
		var produced sync.WaitGroup
		var produceErr error
		var mu sync.Mutex
		for _, r := range recs {
			produced.Add(1)
			sess.Produce(ctx, &kgo.Record{
				Topic:     out,
				Partition: r.Partition,
				Key:       r.Key,
				Value:     append([]byte("copy:"), r.Value...),
			}, func(_ *kgo.Record, err error) {
				if err != nil {
					mu.Lock()
					produceErr = err
					mu.Unlock()
				}
				produced.Done()
			})
		}
		produced.Wait()
		try := kgo.TryCommit
		if produceErr != nil {
			fmt.Fprintf(os.Stderr, "produce error, aborting: %v\n", produceErr)
			try = kgo.TryAbort
		}
		ok, err := sess.End(ctx, try)
		if err != nil {
			fmt.Fprintf(os.Stderr, "end: %v\n", err)
			continue
		}
		if ok {
			committed += len(recs)
			fmt.Printf("committed %d\n", committed)
		}
		// Slow enough that the check can kill a member in the middle of the run.
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}

type member struct {
	cmd       *exec.Cmd
	committed chan int
	done      chan error
}

func startMember(boot, in, out, group, txnID string) (*member, error) {
	cmd := exec.Command(os.Args[0], "-bootstrap", boot, "-eos-member", txnID, "-eos-in", in, "-eos-out", out,
		"-eos-group", group)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	m := &member{cmd: cmd, committed: make(chan int, 1024), done: make(chan error, 1)}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if n, err := strconv.Atoi(strings.TrimPrefix(sc.Text(), "committed ")); err == nil {
				select {
				case m.committed <- n:
				default:
				}
			}
		}
		m.done <- cmd.Wait()
	}()
	return m, nil
}

// checkEOS runs the exactly-once check; run makes the names unique.
func checkEOS(ctx context.Context, boot string, adm *kadm.Client, run int64) error {
	in := fmt.Sprintf("franz-go-eos-in-%d", run)
	out := fmt.Sprintf("franz-go-eos-out-%d", run)
	group := fmt.Sprintf("franz-go-eos-%d", run)
	created, err := adm.CreateTopics(ctx, 3, -1, nil, in, out)
	if err == nil {
		err = created.Error()
	}
	if err != nil {
		return fmt.Errorf("create topics: %w", err)
	}
	prod, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(boot, ",")...))
	if err != nil {
		return err
	}
	var rs []*kgo.Record
	for i := 0; i < eosRecords; i++ {
		rs = append(rs, &kgo.Record{Topic: in, Key: []byte(fmt.Sprintf("k%d", i%97)), Value: []byte(fmt.Sprintf("v%d", i))})
	}
	err = prod.ProduceSync(ctx, rs...).FirstErr()
	prod.Close()
	if err != nil {
		return fmt.Errorf("produce input: %w", err)
	}

	a, err := startMember(boot, in, out, group, group+"-a")
	if err != nil {
		return err
	}
	b, err := startMember(boot, in, out, group, group+"-b")
	if err != nil {
		a.cmd.Process.Kill()
		return err
	}
	defer func() {
		for _, m := range []*member{a, b} {
			if m.cmd.ProcessState == nil {
				m.cmd.Process.Kill()
			}
		}
	}()
	// Kill a once it has committed something, while the input is far from drained.
	for n := 0; n < 300; {
		select {
		case n = <-a.committed:
		case err := <-a.done:
			return fmt.Errorf("member a exited before it could be killed: %v", err)
		case <-ctx.Done():
			return fmt.Errorf("member a committed nothing: %w", ctx.Err())
		}
	}
	a.cmd.Process.Kill()
	<-a.done
	fmt.Fprintf(os.Stderr, "eos: member a killed with SIGKILL mid-run; starting it again\n")
	a, err = startMember(boot, in, out, group, group+"-a")
	if err != nil {
		return err
	}
	for _, m := range []*member{a, b} {
		select {
		case err := <-m.done:
			if err != nil {
				return fmt.Errorf("member exited: %w", err)
			}
		case <-ctx.Done():
			return fmt.Errorf("members did not finish: %w", ctx.Err())
		}
	}

	// The output, read_committed, from the start.
	cons, err := kgo.NewClient(
		kgo.SeedBrokers(strings.Split(boot, ",")...),
		kgo.ConsumeTopics(out, in),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
	)
	if err != nil {
		return err
	}
	defer cons.Close()
	got := map[string]map[int32][]string{in: {}, out: {}}
	total := 0
	for total < 2*eosRecords {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		fetches := cons.PollFetches(pctx)
		cancel()
		n := 0
		fetches.EachRecord(func(r *kgo.Record) {
			got[r.Topic][r.Partition] = append(got[r.Topic][r.Partition], string(r.Value))
			n++
		})
		total += n
		if n == 0 {
			break // quiet: compare what there is
		}
	}
	for p, values := range got[in] {
		want := make([]string, len(values))
		for i, v := range values {
			want[i] = "copy:" + v
		}
		have := got[out][p]
		if len(have) != len(want) {
			return fmt.Errorf("output partition %d holds %d committed records, input %d", p, len(have), len(want))
		}
		for i := range want {
			if have[i] != want[i] {
				return fmt.Errorf("output partition %d record %d is %q, want %q", p, i, have[i], want[i])
			}
		}
	}
	if n := len(got[out][0]) + len(got[out][1]) + len(got[out][2]); n != eosRecords {
		return fmt.Errorf("%d committed output records, want %d", n, eosRecords)
	}
	return nil
}
