"""Unit tests of threadgate_producer without AWS: validation, batching and retries of send(),
and the done/exit-code rules of wait(). Fake clients stand in for boto3's here only; the
integration test (test/integration/package/install.test.ts) runs the package against the
deployed local stack."""

import json
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import threadgate_producer as tg  # noqa: E402
from threadgate_producer.outcomes import tally  # noqa: E402

GOOD = {"record_key": "k1", "sitekey": "abc", "pageurl": "https://f.example.com/a",
        "submit_url": "https://f.example.com/s"}


class FakeSqs:
    """Fails the first `transient` attempts of every entry on SQS's side; sender-faults `bad` keys."""

    def __init__(self, transient=0, bad=()):
        self.transient, self.bad, self.calls, self.seen, self.bodies = transient, set(bad), [], {}, []

    def send_message_batch(self, QueueUrl, Entries):
        self.calls.append([e["Id"] for e in Entries])
        self.bodies.extend(json.loads(e["MessageBody"]) for e in Entries)
        ok, failed = [], []
        for e in Entries:
            self.seen[e["Id"]] = self.seen.get(e["Id"], 0) + 1
            if any(f'"record_key":"{b}"' in e["MessageBody"] for b in self.bad):
                failed.append({"Id": e["Id"], "SenderFault": True, "Code": "InvalidParameterValue", "Message": "no"})
            elif self.seen[e["Id"]] <= self.transient:
                failed.append({"Id": e["Id"], "SenderFault": False, "Code": "InternalError"})
            else:
                ok.append({"Id": e["Id"]})
        return {"Successful": ok, "Failed": failed}


class Validate(unittest.TestCase):
    def test_accepts_a_flat_record(self):
        self.assertEqual(tg.validate(GOOD), [])

    def test_names_the_field_and_the_schema_rule(self):
        reasons = tg.validate({**GOOD, "record_key": "a b", "extra": 1, "pageurl": "ftp://x"})
        self.assertIn("record_key: must match ^[\\x21-\\x7e]+$", reasons)
        self.assertIn("extra: is not allowed", reasons)
        self.assertIn("pageurl: must be an absolute http(s) URL", reasons)

    def test_requires_the_schema_required_fields(self):
        self.assertEqual(tg.validate({"record_key": "k"}), ["pageurl: is required", "submit_url: is required"])

    def test_picks_the_captcha_form_by_type(self):
        self.assertEqual(tg.validate({**GOOD, "captcha": {"type": "recaptcha_v3", "min_score": 2}}),
                         ["captcha.min_score: must be <= 0.9"])
        self.assertEqual(tg.validate({**GOOD, "captcha": {"type": "nope"}}),
                         ["captcha.type: must be one of recaptcha_v2, recaptcha_v3, recaptcha_enterprise, turnstile, image"])

    def test_a_trailing_newline_does_not_pass_a_pattern(self):
        self.assertEqual(tg.validate({**GOOD, "record_key": "k\n"}), ["record_key: must match ^[\\x21-\\x7e]+$"])

    def test_knows_the_expect_block(self):
        good = {"status": [303, "2xx", "200-204"], "body_includes": ["Thank you"],
                "body_excludes": ["verification failed"], "location": "/thanks"}
        self.assertEqual(tg.validate({**GOOD, "expect": good}), [])
        self.assertEqual(tg.validate({**GOOD, "expect": {}}), [])
        self.assertEqual(tg.validate({**GOOD, "expect": {"status": [500]}}), ["expect.status.0: must be <= 399"])
        self.assertEqual(tg.validate({**GOOD, "expect": {"status": ["5xx"]}}),
                         ["expect.status.0: must match ^(?:[23]xx|[23]\\d\\d(?:-[23]\\d\\d)?)$"])
        self.assertEqual(tg.validate({**GOOD, "expect": {"body_excludes": []}}),
                         ["expect.body_excludes: must have at least 1 item"])
        self.assertEqual(tg.validate({**GOOD, "expect": {"body_includes": ["x" * 201]}}),
                         ["expect.body_includes.0: must be at most 200 characters"])
        self.assertEqual(tg.validate({**GOOD, "expect": {"body_regex": "a.*b"}}), ["expect.body_regex: is not allowed"])

    def test_refuses_booleans_as_numbers(self):
        self.assertEqual(tg.validate({**GOOD, "captcha": {"type": "recaptcha_v3", "min_score": True}}),
                         ["captcha.min_score: must be a number"])


class Send(unittest.TestCase):
    def test_sends_valid_records_in_batches_of_10_under_the_batch(self):
        sqs = FakeSqs()
        records = [{**GOOD, "record_key": f"k{i}"} for i in range(23)] + [{"record_key": "bad"}]
        result = tg.send("url", records, batch_id="b1", sqs=sqs, sleep=lambda s: None)
        self.assertEqual(result.sent, 23)
        self.assertEqual([len(c) for c in sqs.calls], [10, 10, 3])
        self.assertEqual([(r.index, r.record_key) for r in result.refused], [(23, "bad")])
        self.assertEqual(len(result.keys), 23)

    def test_retries_entries_sqs_failed_on_its_side(self):
        sqs = FakeSqs(transient=2)
        result = tg.send("url", [GOOD, {**GOOD, "record_key": "k2"}], sqs=sqs, sleep=lambda s: None)
        self.assertEqual(result.sent, 2)
        self.assertEqual(len(sqs.calls), 3)

    def test_refuses_sender_faults_and_raises_when_retries_run_out(self):
        result = tg.send("url", [GOOD, {**GOOD, "record_key": "k2"}], sqs=FakeSqs(bad=["k2"]), sleep=lambda s: None)
        self.assertEqual((result.sent, [r.record_key for r in result.refused]), (1, ["k2"]))
        with self.assertRaises(RuntimeError):
            tg.send("url", [GOOD], sqs=FakeSqs(transient=99), sleep=lambda s: None)

    def test_sends_a_record_of_another_batch_under_the_batch_being_sent(self):
        sqs = FakeSqs()
        result = tg.send("url", [{**GOOD, "batch_id": "other"}], batch_id="b1", sqs=sqs)
        self.assertEqual((result.sent, result.refused), (1, []))
        self.assertEqual(len(sqs.calls), 1)
        self.assertEqual(sqs.bodies[0]["batch_id"], "b1")


def rows(**counts):
    return [{"record_key": f"{s}{i}", "status": s} for s, n in counts.items() for i in range(n)]


def batch_get(items):
    """A fake BatchGetItem over `items` (DynamoDB JSON): the whole rows of the keys asked for."""
    def batch_get_item(self, RequestItems):
        (table, spec), = RequestItems.items()
        wanted = {k["record_key"]["S"] for k in spec["Keys"]}
        return {"Responses": {table: [i for i in items if i["record_key"]["S"] in wanted]}}
    return batch_get_item


class WaitRules(unittest.TestCase):
    def test_done_codes(self):
        self.assertEqual(tally(rows(submitted=3), 3)[2], ("done", tg.EXIT_OK))
        self.assertEqual(tally(rows(submitted=2, failed=1), 3)[2], ("done", tg.EXIT_BAD_TASK))
        self.assertEqual(tally(rows(submitted=2, rejected=1), 3)[2], ("done", tg.EXIT_BAD_TASK))
        self.assertEqual(tally(rows(submitted=1, failed=1, stopped=1), 3)[2], ("done", tg.EXIT_STOP))
        self.assertEqual(tally(rows(submitted=1, failed=1, cancelled=1), 3)[2], ("done", tg.EXIT_CANCELLED))
        self.assertEqual(tally(rows(cancelled=1, stopped=1), 2)[2], ("done", tg.EXIT_STOP))

    def test_a_form_refusal_is_a_failure_counted_apart(self):
        refused = [{"record_key": "a", "status": "failed", "reason": "FORM_REJECTED", "expect_rule": "body_excludes[0]"},
                   {"record_key": "b", "status": "failed", "reason": "FORM_UNCONFIRMED", "expect_rule": "body_includes[0]"},
                   {"record_key": "c", "status": "failed", "reason": "POLL_TIMEOUT"},
                   {"record_key": "d", "status": "submitted", "reason": "OK"}]
        self.assertEqual(tally(refused, 4)[2], ("done", tg.EXIT_BAD_TASK))
        self.assertEqual(tg.form_refusals(refused), {"FORM_REJECTED": 1, "FORM_UNCONFIRMED": 1})
        items = [{k: {"S": v} for k, v in r.items()} for r in refused]
        dynamodb = type("D", (), {"query": lambda self, **kw: {"Items": items}, "get_item": lambda self, **kw: {},
                                  "batch_get_item": batch_get(items)})()
        result = tg.wait("t", "b", expect=4, dynamodb=dynamodb, sleep=lambda s: None)
        self.assertEqual((result.exit_code, result.form_refused), (2, {"FORM_REJECTED": 1, "FORM_UNCONFIRMED": 1}))
        self.assertIn("the form said no: FORM_REJECTED 1, FORM_UNCONFIRMED 1", result.message)

    def test_not_done_while_short_or_a_row_is_in_progress(self):
        self.assertIsNone(tally(rows(submitted=2), 3)[2])
        self.assertIsNone(tally(rows(submitted=3, in_progress=1), 4)[2])

    def test_more_records_than_expected_ends_at_once_with_2(self):
        self.assertEqual(tally(rows(submitted=4), 3)[2], ("too_many", tg.EXIT_BAD_TASK))
        self.assertEqual(tally(rows(submitted=1, in_progress=3), 3)[2], ("too_many", tg.EXIT_BAD_TASK))

    def test_expect_0_is_done_at_once_unless_a_row_carries_the_batch(self):
        def table(items):
            return type("D", (), {"query": lambda self, **kw: {"Items": items}, "get_item": lambda self, **kw: {},
                                  "batch_get_item": batch_get(items)})()

        empty = tg.wait("t", "b", expect=0, dynamodb=table([]), sleep=lambda s: None)
        self.assertEqual((empty.end, empty.exit_code, empty.counts), ("done", tg.EXIT_OK, {}))
        one = tg.wait("t", "b", expect=0, dynamodb=table([{"record_key": {"S": "a"}, "status": {"S": "submitted"}}]),
                      sleep=lambda s: None)
        self.assertEqual((one.end, one.exit_code), ("too_many", tg.EXIT_BAD_TASK))
        with self.assertRaises(ValueError):
            tg.wait("t", "b", expect=-1, dynamodb=table([]))

    def test_times_out_with_4(self):
        clock = iter(range(0, 1000, 5))
        items = [{"record_key": {"S": "a"}, "status": {"S": "in_progress"}}]
        dynamodb = type("D", (), {"query": lambda self, **kw: {"Items": items},
                                  "get_item": lambda self, **kw: {}, "batch_get_item": batch_get(items)})()
        result = tg.wait("t", "b", expect=1, timeout_s=10, dynamodb=dynamodb, sleep=lambda s: None,
                         now=lambda: next(clock))
        self.assertEqual((result.end, result.exit_code, result.counts), ("timeout", 4, {"in_progress": 1}))
        # When and why: the timeout_s it gave up at, what was left, and that the CLI would count the DLQ.
        self.assertIn("gave up after timeout_s=10 s", result.message)
        self.assertIn("1 of 1 records not ended: 1 in progress, 0 without a row yet", result.message)
        self.assertIn("threadgate wait --batch b --expect 1", result.message)


class PausedPipeline(unittest.TestCase):
    """wait(state_table=…) reads the state item as grantProduce allows: its `state` alone, consistently."""

    def table(self, state):
        gets = []
        items = [{"record_key": {"S": "a"}, "status": {"S": "in_progress"}}]

        class D:
            def query(self, **kw):
                return {"Items": items}

            def get_item(self, **kw):
                gets.append(kw)
                if kw["TableName"] != "ledger":
                    return {}  # the batch's cancel item: none
                return {"Item": {"pk": {"S": "pipeline"}, "sk": {"S": "state"}, "state": {"S": json.dumps(state)}}} \
                    if state is not None else {}

            batch_get_item = batch_get(items)
        return D(), gets

    def test_a_recorded_pause_ends_the_wait_with_3(self):
        dynamodb, gets = self.table({"paused": True, "reason": "CaptchaAI answered ERROR_ZERO_BALANCE", "by": "worker"})
        result = tg.wait("t", "b", expect=1, dynamodb=dynamodb, state_table="ledger", sleep=lambda s: None)
        self.assertEqual((result.end, result.exit_code), ("paused", tg.EXIT_STOP))
        self.assertIn("ERROR_ZERO_BALANCE", result.message)
        state_reads = [g for g in gets if g["TableName"] == "ledger"]
        self.assertEqual(state_reads, [{
            "TableName": "ledger", "Key": {"pk": {"S": "pipeline"}, "sk": {"S": "state"}}, "ConsistentRead": True,
            "ProjectionExpression": "#state", "ExpressionAttributeNames": {"#state": "state"}}])

    def test_no_state_recorded_or_a_resume_is_running(self):
        for state in (None, {"paused": False, "by": "operator"}):
            dynamodb, _ = self.table(state)
            clock = iter(range(0, 1000, 5))
            result = tg.wait("t", "b", expect=1, timeout_s=10, dynamodb=dynamodb, state_table="ledger",
                             sleep=lambda s: None, now=lambda: next(clock))
            self.assertEqual(result.end, "timeout")


class BatchReads(unittest.TestCase):
    """The batch index holds status and reason only: waits poll it, whole rows are read by key."""

    def table(self):
        whole = [{"record_key": {"S": k}, "batch_id": {"S": "b"}, "status": {"S": st}, "attempts": {"N": "1"},
                  "created_at": {"S": c}} for k, st, c in (("z", "submitted", "1"), ("a", "in_progress", "2"))]
        polls = iter([[{k: i[k] for k in ("record_key", "batch_id", "created_at", "status")} for i in whole],
                      [{**{k: i[k] for k in ("record_key", "batch_id", "created_at")}, "status": {"S": "submitted"}}
                       for i in whole]])
        calls = {"query": [], "batch_get_item": 0}

        poll = []

        class D:
            def query(self, **kw):
                calls["query"].append(kw["IndexName"])
                # One poll queries every shard, shard 0 first; the rows answer on shard 0 alone.
                if kw["ExpressionAttributeValues"][":s"]["S"].endswith("#0"):
                    poll[:] = next(polls)
                    return {"Items": poll}
                return {"Items": []}

            def get_item(self, **kw):
                return {}

            def batch_get_item(self, RequestItems):
                calls["batch_get_item"] += 1
                return batch_get([{**i, "status": {"S": "submitted"}} for i in whole])(self, RequestItems)
        return D(), calls

    def test_wait_polls_the_index_and_reads_the_whole_rows_once_at_the_end(self):
        dynamodb, calls = self.table()
        result = tg.wait("t", "b", expect=2, dynamodb=dynamodb, sleep=lambda s: None)
        self.assertEqual((result.end, result.exit_code), ("done", tg.EXIT_OK))
        self.assertEqual(calls, {"query": ["batch_shard-status_at"] * 2 * tg.BATCH_SHARDS, "batch_get_item": 1})
        self.assertEqual([(r["record_key"], r["attempts"]) for r in result.rows], [("z", 1), ("a", 1)])

    def test_batch_outcomes_gives_whole_rows_in_the_index_order(self):
        dynamodb, calls = self.table()
        rows = tg.batch_outcomes("t", "b", dynamodb=dynamodb)
        self.assertEqual([(r["record_key"], r["attempts"]) for r in rows], [("z", 1), ("a", 1)])
        self.assertEqual(calls["batch_get_item"], 1)

class Tenants(unittest.TestCase):
    def sent_groups(self, records, **kw):
        class Sqs:
            entries = []

            def send_message_batch(self, QueueUrl, Entries):
                self.entries.extend(Entries)
                return {"Successful": [{"Id": e["Id"]} for e in Entries], "Failed": []}
        sqs = Sqs()
        tg.send("q", records, sqs=sqs, **kw)
        return [e.get("MessageGroupId") for e in sqs.entries]

    def test_the_batch_is_the_tenant_by_default_and_tenant_overrides_it(self):
        other = {**GOOD, "record_key": "k2"}
        self.assertEqual(self.sent_groups([GOOD, other], batch_id="nightly-1"), ["nightly-1", "nightly-1"])
        self.assertEqual(self.sent_groups([GOOD], batch_id="nightly-1", tenant="partner"), ["partner"])
        self.assertEqual(self.sent_groups([GOOD]), [None])
        self.assertEqual(self.sent_groups([{**GOOD, "batch_id": "b" * 200}]), ["b" * 128])
        with self.assertRaises(ValueError):
            tg.send("q", [GOOD], tenant="has space", sqs=object())


class CancelRules(unittest.TestCase):
    def fake(self, cancel_item, rows_):
        class D:
            def __init__(self):
                self.puts = []

            def query(self, **kw):
                return {"Items": rows_}

            def get_item(self, **kw):
                assert kw["Key"] == {"record_key": {"S": "cancelled batch b"}}, kw
                return {"Item": cancel_item} if cancel_item else {}

            def put_item(self, **kw):
                self.puts.append(kw)

            batch_get_item = batch_get(rows_)
        return D()

    def test_a_cancelled_batch_ends_the_wait_with_5_once_nothing_is_in_progress(self):
        cancel = {"record_key": {"S": "cancelled batch b"}, "cancelled_batch": {"S": "b"},
                  "cancelled_at": {"S": "2026-12-03T12:00:00.000Z"}, "cancelled_by": {"S": "operator"}}
        done = [{"record_key": {"S": "a"}, "status": {"S": "cancelled"}}]
        result = tg.wait("t", "b", expect=3, dynamodb=self.fake(cancel, done), sleep=lambda s: None)
        self.assertEqual((result.end, result.exit_code, result.ended), ("cancelled", tg.EXIT_CANCELLED, 1))
        self.assertEqual(result.cancel["batch_id"], "b")

    def test_a_cancelled_batch_is_not_ended_before_cancelled_at_plus_the_bound(self):
        # cancelled at 12:00:00; the wait starts 1 s later with nothing in progress; a worker whose
        # cache still said "not cancelled" claims the other record at +3 s and posts it at +5 s.
        at = tg.outcomes._epoch_s("2026-12-03T12:00:00.000Z")
        clock = {"t": at + 1}
        cancel = {"record_key": {"S": "cancelled batch b"}, "cancelled_batch": {"S": "b"},
                  "cancelled_at": {"S": "2026-12-03T12:00:00.000Z"}, "cancelled_by": {"S": "operator"}}

        def rows_now():
            late = [] if clock["t"] < at + 3 else [
                {"record_key": {"S": "z"}, "status": {"S": "in_progress" if clock["t"] < at + 5 else "submitted"}}]
            return [{"record_key": {"S": "a"}, "status": {"S": "cancelled"}}] + late
        looks = []

        class D:
            def query(self, **kw):
                if kw["ExpressionAttributeValues"][":s"]["S"].endswith("#0"):  # a look starts on shard 0
                    looks.append(clock["t"])
                return {"Items": rows_now()}

            def get_item(self, **kw):
                assert kw["ProjectionExpression"].split(", ") == list(tg.outcomes.CANCEL_ITEM_ATTRIBUTES), kw
                return {"Item": cancel}

            def batch_get_item(self, **kw):
                # The result's whole rows, read by key once the wait ends.
                return {"Responses": {"t": rows_now()}}

        def sleep(s):
            clock["t"] += s
        result = tg.wait("t", "b", expect=3, dynamodb=D(), sleep=sleep, clock=lambda: clock["t"],
                         now=lambda: clock["t"])
        self.assertEqual((result.end, result.exit_code), ("cancelled", tg.EXIT_CANCELLED))
        self.assertEqual(result.counts, {"cancelled": 1, "submitted": 1})
        self.assertGreaterEqual(looks[-1], at + tg.outcomes.CANCEL_BOUND_S)
        self.assertTrue(all(t < at + tg.outcomes.CANCEL_BOUND_S for t in looks[:-1]))

    def test_cancel_writes_one_conditional_item_and_refuses_a_bad_batch_id(self):
        d = self.fake(None, [])
        out = tg.cancel("t", "b", "wrong URL", dynamodb=d)
        self.assertEqual((out["batch_id"], out["reason"], out["already"]), ("b", "wrong URL", False))
        self.assertEqual(d.puts[0]["ConditionExpression"], "attribute_not_exists(record_key)")
        self.assertEqual(d.puts[0]["Item"]["record_key"], {"S": "cancelled batch b"})
        with self.assertRaises(ValueError):
            tg.cancel("t", "has space", dynamodb=d)


class Region(unittest.TestCase):
    """boto3 does not read AWS_REGION; the package does, first, as the CLI does."""

    def setUp(self):
        self.saved = dict(os.environ)
        for name in ("AWS_DEFAULT_REGION", "AWS_PROFILE", "AWS_REGION"):
            os.environ.pop(name, None)
        os.environ["AWS_CONFIG_FILE"] = os.devnull  # no profile region
        os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing")

    def tearDown(self):
        os.environ.clear()
        os.environ.update(self.saved)

    def test_aws_region_alone_is_the_region_of_every_client(self):
        os.environ["AWS_REGION"] = "eu-west-3"
        outcomes, send = (sys.modules[f"threadgate_producer.{m}"] for m in ("outcomes", "send"))
        self.assertEqual(send._client(None).meta.region_name, "eu-west-3")
        for name in ("dynamodb", "cloudformation"):
            self.assertEqual(outcomes._client(name, None).meta.region_name, "eu-west-3")

    def test_aws_region_comes_before_aws_default_region(self):
        os.environ.update(AWS_REGION="eu-west-3", AWS_DEFAULT_REGION="us-east-2")
        send = sys.modules["threadgate_producer.send"]  # the module: the package's `send` is the function
        self.assertEqual(send._client(None).meta.region_name, "eu-west-3")


if __name__ == "__main__":
    unittest.main()


class BatchShards(unittest.TestCase):
    def test_a_record_key_hashes_to_the_shard_the_typescript_store_writes(self):
        # The FNV-1a vectors test/unit/functions/records/batch-index.test.ts checks too.
        self.assertEqual(tg.batch_shard_number("", 2 ** 32), 0x811C9DC5)
        self.assertEqual(tg.batch_shard_number("foobar", 2 ** 32), 0xBF9CF968)
        self.assertEqual(tg.batch_shard_number("é", 2 ** 32), 0x1E9DE8C1)
        self.assertEqual(tg.batch_shard_number("order-1"), 13)  # batchShardNumber('order-1') in TypeScript
