// SCRAM with franz-go, run by compat-tests/security (not by this folder's run.sh):
//
//	go run . -sasl-admin 127.0.0.1:9092 -sasl-bootstrap 127.0.0.1:9096 [-sasl-ca ca.pem]
//
// kadm makes a SCRAM-SHA-512 user over the admin (PLAINTEXT) address and describes it;
// a client logging in as that user with franz-go's scram mechanism (over TLS when a CA is
// given) produces 50 records and a second one consumes them all; a wrong password is
// refused; after kadm deletes the credential, the user can no longer log in.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

func saslChecks(adminBoot, saslBoot, ca string) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	run := time.Now().UnixNano()
	user, password := fmt.Sprintf("franz-%d", run), "franz-secret"
	topic := fmt.Sprintf("franz-scram-%d", run)

	admin, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(adminBoot, ",")...))
	if !check("scram-admin-client", err) {
		finish()
	}
	defer admin.Close()
	adm := kadm.NewClient(admin)
	altered, err := adm.AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{{
		User: user, Mechanism: kadm.ScramSha512, Iterations: 8192, Password: password,
	}})
	if err == nil {
		err = altered.Error()
	}
	if !check("scram-user-created", err) {
		finish()
	}
	described, err := adm.DescribeUserSCRAMs(ctx, user)
	if err == nil {
		err = described.Error()
	}
	if err == nil {
		infos := described[user].CredInfos
		if len(infos) != 1 || infos[0].Mechanism != kadm.ScramSha512 || infos[0].Iterations != 8192 {
			err = fmt.Errorf("described as %v", infos)
		}
	}
	check("scram-user-described", err)

	opts := func(pw string) []kgo.Opt {
		o := []kgo.Opt{
			kgo.SeedBrokers(strings.Split(saslBoot, ",")...),
			kgo.SASL(scram.Auth{User: user, Pass: pw}.AsSha512Mechanism()),
			kgo.RequestRetries(2),
		}
		if ca != "" {
			pem, err := os.ReadFile(ca)
			if err != nil {
				check("scram-read-ca", err)
				finish()
			}
			pool := x509.NewCertPool()
			pool.AppendCertsFromPEM(pem)
			o = append(o, kgo.DialTLSConfig(&tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}))
		}
		return o
	}
	// Produce and consume as the SCRAM user.
	cl, err := kgo.NewClient(append(opts(password), kgo.DefaultProduceTopic(topic), kgo.AllowAutoTopicCreation())...)
	if !check("scram-client", err) {
		finish()
	}
	for i := 0; i < 50; i++ {
		err = cl.ProduceSync(ctx, kgo.StringRecord(fmt.Sprintf("scram-%d", i))).FirstErr()
		if err != nil {
			break
		}
	}
	cl.Close()
	check("scram-produce", err)
	reader, err := kgo.NewClient(append(opts(password), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	if err == nil {
		seen := 0
		for seen < 50 && ctx.Err() == nil {
			fetches := reader.PollFetches(ctx)
			if e := fetches.Err(); e != nil && e != context.DeadlineExceeded {
				err = e
				break
			}
			seen += fetches.NumRecords()
		}
		if err == nil && seen != 50 {
			err = fmt.Errorf("read %d of 50 records", seen)
		}
		reader.Close()
	}
	check("scram-consume", err)

	// refused: a login that must fail, and fail as an authentication error.
	refused := func(name, pw string) {
		short, cancelShort := context.WithTimeout(ctx, 30*time.Second)
		defer cancelShort()
		c, err := kgo.NewClient(opts(pw)...)
		if err == nil {
			err = c.Ping(short)
			c.Close()
		}
		switch {
		case err == nil:
			check(name, fmt.Errorf("logged in"))
		case !strings.Contains(strings.ToLower(err.Error()), "sasl"):
			check(name, fmt.Errorf("refused, but not as an authentication failure: %v", err))
		default:
			check(name, nil)
		}
	}
	refused("scram-wrong-password-refused", "not-the-password")
	deleted, err := adm.AlterUserSCRAMs(ctx, []kadm.DeleteSCRAM{{User: user, Mechanism: kadm.ScramSha512}}, nil)
	if err == nil {
		err = deleted.Error()
	}
	if check("scram-user-deleted", err) {
		refused("scram-deleted-user-refused", password)
	}
	finish()
}
