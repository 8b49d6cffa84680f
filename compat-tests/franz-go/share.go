package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

const shareRecords = 200

// setGroupConfig sets one group config (IncrementalAlterConfigs on a GROUP resource).
func setGroupConfig(ctx context.Context, admin *kgo.Client, group, name, value string) error {
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType = kmsg.ConfigResourceTypeGroupConfig
	res.ResourceName = group
	cfg := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	cfg.Name = name
	cfg.Value = &value
	cfg.Op = kmsg.IncrementalAlterConfigOpSet
	res.Configs = append(res.Configs, cfg)
	req.Resources = append(req.Resources, res)
	resp, err := req.RequestWith(ctx, admin)
	if err != nil {
		return err
	}
	for _, r := range resp.Resources {
		if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
			msg := ""
			if r.ErrorMessage != nil {
				msg = *r.ErrorMessage
			}
			return fmt.Errorf("%s=%s: %w %s", name, value, err, msg)
		}
	}
	return nil
}

// checkShare: two franz-go share consumers (KIP-932) of one group read a 3-partition topic
// written before the group existed (share.auto.offset.reset=earliest, a group config).
// Each rejects every 10th record, releases every 7th the first time it is delivered, and
// accepts the rest. Every record but the rejected ones must be accepted exactly once, each
// released record must come back with delivery count 2, and no rejected record may come
// back.
func checkShare(ctx context.Context, boot string, admin *kgo.Client, adm *kadm.Client, run int64) error {
	topic := fmt.Sprintf("franz-go-share-%d", run)
	group := fmt.Sprintf("franz-go-share-group-%d", run)
	created, err := adm.CreateTopics(ctx, 3, 1, nil, topic)
	if err == nil {
		err = created.Error()
	}
	if err != nil {
		return fmt.Errorf("create topic: %w", err)
	}
	var produced []*kgo.Record
	for i := 0; i < shareRecords; i++ {
		produced = append(produced, &kgo.Record{Topic: topic, Value: []byte(fmt.Sprintf("s%d", i))})
	}
	if err := admin.ProduceSync(ctx, produced...).FirstErr(); err != nil {
		return fmt.Errorf("produce: %w", err)
	}
	if err := setGroupConfig(ctx, admin, group, "share.auto.offset.reset", "earliest"); err != nil {
		return fmt.Errorf("group config: %w", err)
	}

	var mu sync.Mutex
	accepted := map[int]int{}
	released := map[int]bool{}
	rejected := map[int]bool{}
	var problems []string
	consume := func() error {
		cl, err := kgo.NewClient(
			kgo.SeedBrokers(strings.Split(boot, ",")...),
			kgo.ShareGroup(group),
			kgo.ConsumeTopics(topic),
			kgo.FetchMaxWait(500*time.Millisecond),
		)
		if err != nil {
			return err
		}
		defer cl.Close()
		last := time.Now()
		for {
			mu.Lock()
			done := len(accepted)+len(rejected) == shareRecords
			mu.Unlock()
			if done || time.Since(last) > 20*time.Second {
				return cl.FlushAcks(ctx)
			}
			pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			fetches := cl.PollRecords(pctx, 50)
			cancel()
			if err := ctx.Err(); err != nil {
				return err
			}
			fetches.EachRecord(func(r *kgo.Record) {
				last = time.Now()
				i, err := strconv.Atoi(strings.TrimPrefix(string(r.Value), "s"))
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err != nil:
					problems = append(problems, fmt.Sprintf("unexpected record %q", r.Value))
				case rejected[i]:
					problems = append(problems, fmt.Sprintf("rejected record %d delivered again", i))
					r.Ack(kgo.AckReject)
				case i%10 == 0:
					rejected[i] = true
					r.Ack(kgo.AckReject)
				case i%7 == 0 && !released[i]:
					released[i] = true
					r.Ack(kgo.AckRelease)
				default:
					if released[i] && r.DeliveryCount() < 2 {
						problems = append(problems, fmt.Sprintf("released record %d came back with delivery count %d", i, r.DeliveryCount()))
					}
					accepted[i]++
					r.Ack(kgo.AckAccept)
				}
			})
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for k := range errs {
		wg.Add(1)
		go func(k int) {
			defer wg.Done()
			errs[k] = consume()
		}(k)
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return fmt.Errorf("consumer: %w", err)
		}
	}
	for i := 0; i < shareRecords; i++ {
		switch n := accepted[i]; {
		case i%10 == 0 && n != 0:
			problems = append(problems, fmt.Sprintf("rejected record %d accepted", i))
		case i%10 != 0 && n != 1:
			problems = append(problems, fmt.Sprintf("record %d accepted %d times", i, n))
		}
	}
	if len(problems) > 0 {
		if len(problems) > 5 {
			problems = append(problems[:5], fmt.Sprintf("... %d more", len(problems)-5))
		}
		return fmt.Errorf("%s", strings.Join(problems, "; "))
	}
	return nil
}
