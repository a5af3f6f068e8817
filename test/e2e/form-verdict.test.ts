import { DeleteMessageBatchCommand, ReceiveMessageCommand } from '@aws-sdk/client-sqs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { LocalStack } from '../../local/stack/local-stack.js';
import { readOutcomes } from '../../local/stack/observation.js';
import { feedQueue } from '../../local/stack/run.js';
import { FORM_PAGE_SENTINEL, FORM_PAGE_TEXTS } from '../../local/standins/target.js';
import {
  allFinished,
  dlqCount,
  logText,
  outcomesOf,
  sharedE2eStack,
  TOKEN_PATTERN,
  uniquePrefix,
  waitFor,
} from './harness.js';
import { e2eTarget } from './target.js';

/**
 * `submitted` means the form accepted the record: records with an `expect` block against the
 * target stand-in's forms that say no with a 200 (local/standins/target.ts `/form-200/…`). A
 * token the form refuses is one solved for another sitekey: CaptchaAI's stand-in solves it, the
 * form's own verification says SITEKEY_MISMATCH and answers its page with an error text and 200.
 * Each record is POSTed once (counted at the stand-in), and nothing of a page reaches a row, the
 * outcome stream, a log line or a metric (the metrics are log lines too: EMF).
 * moto only: the log check reads the local runtime's logs, which LocalStack keeps in containers.
 */
let stack: LocalStack;

beforeAll(async () => {
  stack = await sharedE2eStack('form-verdict');
}, 600_000);
afterAll(async () => {
  await stack?.stop();
});

interface Case {
  name: string;
  shape: 'page' | 'silent' | 'redirect' | 'json';
  /** The form refuses the token (solved for another sitekey). */
  refused: boolean;
  expect?: Record<string, unknown>;
  outcome: { status: string; reason: string; expect_rule?: string };
}

const EXCLUDES = { body_excludes: ['Verification failed'] };
const CASES: Case[] = [
  {
    name: 'excl-ok',
    shape: 'page',
    refused: false,
    expect: EXCLUDES,
    outcome: { status: 'submitted', reason: 'OK' },
  },
  {
    name: 'excl-no',
    shape: 'page',
    refused: true,
    expect: EXCLUDES,
    outcome: { status: 'failed', reason: 'FORM_REJECTED', expect_rule: 'body_excludes[0]' },
  },
  {
    name: 'incl-ok',
    shape: 'page',
    refused: false,
    expect: { body_includes: ['thank you'] },
    outcome: { status: 'submitted', reason: 'OK' },
  },
  {
    name: 'incl-none',
    shape: 'silent',
    refused: false,
    expect: { body_includes: ['thank you'] },
    outcome: { status: 'failed', reason: 'FORM_UNCONFIRMED', expect_rule: 'body_includes[0]' },
  },
  {
    name: 'loc-ok',
    shape: 'redirect',
    refused: false,
    expect: { location: '/thanks' },
    outcome: { status: 'submitted', reason: 'OK' },
  },
  {
    name: 'loc-no',
    shape: 'redirect',
    refused: true,
    expect: { location: '/thanks' },
    outcome: { status: 'failed', reason: 'FORM_REJECTED', expect_rule: 'location: redirect not to /thanks' },
  },
  {
    name: 'json-no',
    shape: 'json',
    refused: true,
    expect: { body_includes: ['"ok":true'] },
    outcome: { status: 'failed', reason: 'FORM_UNCONFIRMED', expect_rule: 'body_includes[0]' },
  },
  // No expect: today's rule, a 200 is submitted even though this form refused the token.
  { name: 'plain-no', shape: 'page', refused: true, outcome: { status: 'submitted', reason: 'OK' } },
];

describe.skipIf(e2eTarget() !== 'moto')('the form verdict (deployed local stack)', () => {
  it('expect decides submitted / FORM_REJECTED / FORM_UNCONFIRMED from the form answer, one POST per record, no page text anywhere', async () => {
    // Prepare
    const prefix = uniquePrefix('verdict');
    const keyOf = (c: Case) => `${prefix}-${c.name}`;
    const bodies = CASES.map((c) => {
      const url = `${stack.site.url}/form-200/${c.shape}/${keyOf(c)}`;
      return JSON.stringify({
        record_key: keyOf(c),
        sitekey: c.refused ? `${stack.site.sitekey}-other` : stack.site.sitekey,
        pageurl: url,
        submit_url: url,
        form: { record: keyOf(c) },
        ...(c.expect ? { expect: c.expect } : {}),
      });
    });
    const keys = CASES.map(keyOf);
    const { next } = stack.site.events();
    // Act
    await feedQueue(stack, stack.outputs.QueueUrl, bodies);
    await waitFor('every record', () => allFinished(stack, bodies), { timeoutMs: 120_000, intervalMs: 500 });
    // Assess: each record's outcome is the form's verdict, with the rule that decided.
    const rows = await outcomesOf(stack, keys);
    for (const c of CASES) {
      const row = rows.get(keyOf(c));
      expect({ name: c.name, ...pick(row, ['status', 'reason', 'expect_rule']) }).toEqual({
        name: c.name,
        ...c.outcome,
      });
      expect(row?.target_status).toBe(c.shape === 'redirect' ? 303 : 200);
    }
    // Each record POSTed once, and the form refused exactly the records meant to be refused.
    const events = stack.site.events(next).entries.filter((e) => keys.includes(e.record));
    const received = events.filter((e) => e.kind === 'post-received').map((e) => e.record);
    expect(received.sort()).toEqual([...keys].sort());
    const refusedAtForm = events
      .filter((e) => e.kind === 'post' && e.reason !== undefined)
      .map((e) => e.record);
    expect(refusedAtForm.sort()).toEqual(
      CASES.filter((c) => c.refused)
        .map(keyOf)
        .sort(),
    );
    expect(await dlqCount(stack)).toBe(0);
    // The outcome stream carries the rule, never a page.
    const messages = await publishedFor(new Set(keys));
    const rejected = messages.get(keyOf(CASES[1] as Case));
    expect(rejected).toMatchObject({
      status: 'failed',
      reason: 'FORM_REJECTED',
      expect_rule: 'body_excludes[0]',
    });
    // Nothing of a page body in a row, a stream message, a log line or a metric.
    const logs = logText(stack.logDir);
    expect(logs).toContain(keys[1]); // the logs are the run's own
    const table = JSON.stringify(await readOutcomes(stack));
    const stream = JSON.stringify([...messages.values()]);
    // The sentinel is in every answer of these forms; the two sentences only in their pages (the
    // jobs' own markers, "thank you" and "Verification failed", are configuration, not page text).
    const pageTexts = [FORM_PAGE_SENTINEL, FORM_PAGE_TEXTS.refused, FORM_PAGE_TEXTS.thanks];
    for (const where of [logs, table, stream]) {
      for (const text of pageTexts) expect(where.toLowerCase()).not.toContain(text.toLowerCase());
      expect(where).not.toMatch(TOKEN_PATTERN);
    }
  }, 240_000);
});

function pick(row: object | undefined, fields: string[]): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const f of fields) {
    const value = (row as Record<string, unknown> | undefined)?.[f];
    if (value !== undefined) out[f] = value;
  }
  return out;
}

/** The outcomes queue's final messages of these keys (received and deleted), by record key. */
async function publishedFor(keys: Set<string>): Promise<Map<string, Record<string, unknown>>> {
  const found = new Map<string, Record<string, unknown>>();
  await waitFor(
    'the outcome stream to publish every record',
    async () => {
      const out = await stack.sqs.send(
        new ReceiveMessageCommand({ QueueUrl: stack.outputs.OutcomesQueueUrl, MaxNumberOfMessages: 10 }),
      );
      const messages = out.Messages ?? [];
      for (const m of messages) {
        const body = JSON.parse(m.Body ?? '{}') as Record<string, unknown>;
        if (keys.has(String(body.record_key))) found.set(String(body.record_key), body);
      }
      if (messages.length) {
        await stack.sqs.send(
          new DeleteMessageBatchCommand({
            QueueUrl: stack.outputs.OutcomesQueueUrl,
            Entries: messages.map((m, i) => ({ Id: String(i), ReceiptHandle: m.ReceiptHandle })),
          }),
        );
      }
      return found.size === keys.size;
    },
    { timeoutMs: 60_000, intervalMs: 500 },
  );
  return found;
}
