import { GetQueueAttributesCommand } from '@aws-sdk/client-sqs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { OutcomesStore } from '../../../functions/records/store.js';
import { processBatch } from '../../../functions/worker/batch-loop.js';
import { readWorkerConfig } from '../../../functions/worker/config.js';
import { createWorkerDeps } from '../../../functions/worker.js';
import { addAwsFaults } from '../../../local/emulator/fault-client.js';
import type { MotoServer } from '../../../local/emulator/moto.js';
import type { CaptchaStandin } from '../../../local/standins/captchaai/standin.js';
import { startTargetStandin, type TargetStandin } from '../../../local/standins/target.js';
import {
  type AwsClients,
  clientsFor,
  createWorkerResources,
  receiveAll,
  sendJobs,
  sqsEvent,
  startMoto,
  type WorkerResources,
} from '../../fixtures/aws.js';
import { catalogResolver } from '../../fixtures/job-catalog.js';
import { captureOutput, type LogCapture } from '../../fixtures/log-capture.js';
import { startFastCaptchaStandin, TEST_API_KEY, TEST_TIME_SCALE } from '../../fixtures/solve.js';

/**
 * A stop-class answer in one lane while other lanes work and the queue holds messages on their
 * last allowed receive (functions/worker/batch-loop.ts: a claimed stop stops every lane at once).
 * Counted on the wire: in.php at the CaptchaAI stand-in, rows in moto, the messages' receive
 * counts and the DLQ.
 */

let moto: MotoServer;
let clients: AwsClients;
let captcha: CaptchaStandin;
let target: TargetStandin;
let logs: LogCapture;
let res: WorkerResources;
let store: OutcomesStore;

beforeAll(async () => {
  logs = captureOutput();
  moto = await startMoto();
  clients = clientsFor(moto);
  captcha = await startFastCaptchaStandin(8);
  target = await startTargetStandin({ captchaUrl: captcha.url });
  res = await createWorkerResources(moto, clients, {
    apiKey: TEST_API_KEY,
    captchaUrl: captcha.url,
    allowedHosts: '127.0.0.1',
  });
  store = new OutcomesStore({ client: clients.ddb, tableName: res.tableName });
});
afterAll(async () => {
  logs?.stop();
  await target?.close();
  await captcha?.close();
  await moto?.stop();
});

const pageurlOf = (key: string) => `${target.url}/form/${key}`;
const job = (key: string) =>
  JSON.stringify({
    record_key: key,
    sitekey: target.sitekey,
    pageurl: pageurlOf(key),
    submit_url: pageurlOf(key),
  });

describe('a stop-class answer in one lane of four', () => {
  it('stops every lane at once: no receive spent after the stop is claimed, only the record that met it ends stopped, no in.php after it', async () => {
    // Prepare: 12 messages, each received twice already, so the next receive is the last
    // allowed one (TRANSIENT_RECEIVE_LIMIT 3); the first in.php answers a revoked key.
    const keys = Array.from({ length: 12 }, (_, i) => `stop-${Date.now().toString(36)}-${i}`);
    await sendJobs(clients.sqs, res.queueUrl, keys.map(job));
    for (let round = 0; round < 2; round++) {
      // Each message once a round: hidden for a second, then visible again.
      expect(await receiveAll(clients.sqs, res.queueUrl, 12, 1)).toHaveLength(12);
      await new Promise((resolve) => setTimeout(resolve, 1_200));
    }
    captcha.inject('in.php', [{ body: 'ERROR_KEY_DOES_NOT_EXIST' }]);
    // The stop's path is slow (its DLQ copy answers after 3 s at the emulator; a slow state write
    // would hold the emulator's DynamoDB lock and stall the other lanes too): the other lanes
    // finish their records meanwhile, and must take no more.
    await addAwsFaults(moto.endpoint, [
      { operation: 'SendMessage', service: 'sqs', contains: ['jobs-dlq-'], delay_ms: 3_000, times: 1 },
    ]);
    const config = readWorkerConfig({
      ...res.env,
      LANES: '4',
      INITIAL_CAP: '4',
      CHAIN_SECONDS: '30',
      TIME_SCALE: String(TEST_TIME_SCALE),
      LEASE_SECONDS: '60',
      COOLDOWN_MS: '0',
    });
    const deps = createWorkerDeps(config, clients, { resolver: catalogResolver });
    // Act: four lanes take their messages from the queue themselves (the event is empty).
    await processBatch(sqsEvent([], res.queueArn), deps, {
      lanes: { count: 4, allowed: async () => 4 },
      chainUntil: performance.now() + 30_000,
    });
    // Assess: one record stopped (the one that met the revoked key), the others not.
    const rows = await Promise.all(keys.map((k) => store.get(k)));
    const stopped = rows.filter((r) => r?.status === 'stopped');
    expect(stopped).toHaveLength(1);
    // No in.php after the one that met the stop: at most one per lane, the stop's included.
    const submits = keys.flatMap((k) => captcha.submitTimes(pageurlOf(k)));
    expect(submits.length).toBeLessThanOrEqual(4);
    // The lanes took at most one message each: every other message's receive count is still 2.
    const worked = new Set(rows.filter((r) => r !== undefined).map((r) => r?.record_key));
    expect(worked.size).toBeLessThanOrEqual(4);
    const attributes = await clients.sqs.send(
      new GetQueueAttributesCommand({
        QueueUrl: res.queueUrl,
        AttributeNames: ['ApproximateNumberOfMessages'],
      }),
    );
    // Each message once: hidden for the look's length.
    const left = await receiveAll(clients.sqs, res.queueUrl, 12, 30);
    const untouched = left.filter(
      (m) => !worked.has((JSON.parse(m.Body ?? '{}') as { record_key: string }).record_key),
    );
    expect(untouched.length).toBeGreaterThanOrEqual(8);
    // Observing them is a receive too: each reads 3 = the two before + this look.
    expect(untouched.map((m) => m.Attributes?.ApproximateReceiveCount)).toEqual(untouched.map(() => '3'));
    expect(Number(attributes.Attributes?.ApproximateNumberOfMessages)).toBeGreaterThanOrEqual(
      untouched.length,
    );
    // Every record a lane took that did not meet the stop ended with its reason, none `stopped`.
    const dlq = await receiveAll(clients.sqs, res.dlqUrl, 10, 30);
    const reasons = dlq.map((m) => m.MessageAttributes?.error_code?.StringValue);
    expect(reasons.filter((r) => r === 'ERROR_KEY_DOES_NOT_EXIST')).toHaveLength(1);
  }, 60_000);
});
