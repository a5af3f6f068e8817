import type { Context } from 'aws-lambda';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConfigError } from '../../../functions/common/errors.js';
import { OutcomesStore } from '../../../functions/records/store.js';
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
import { captureOutput, type LogCapture } from '../../fixtures/log-capture.js';
import { startFastCaptchaStandin, TEST_API_KEY, TEST_TIME_SCALE } from '../../fixtures/solve.js';

let moto: MotoServer;
let clients: AwsClients;
let captcha: CaptchaStandin;
let target: TargetStandin;
let res: WorkerResources;
let logs: LogCapture;
const savedEnv = { ...process.env };

beforeAll(async () => {
  logs = captureOutput();
  moto = await startMoto();
  clients = clientsFor(moto);
  captcha = await startFastCaptchaStandin(2);
  target = await startTargetStandin({ captchaUrl: captcha.url });
  res = await createWorkerResources(moto, clients, {
    apiKey: TEST_API_KEY,
    captchaUrl: captcha.url,
    allowedHosts: '127.0.0.1',
  });
});
afterAll(async () => {
  process.env = savedEnv;
  logs?.stop();
  await target?.close();
  await captcha?.close();
  await moto?.stop();
});

function lambdaContext(remainingMs: number): Context {
  return {
    functionName: res.functionName,
    awsRequestId: 'req-1',
    getRemainingTimeInMillis: () => remainingMs,
  } as unknown as Context;
}

describe('worker handler (the Lambda entry point)', () => {
  it('refuses to run with a missing variable and names it', async () => {
    // Prepare: everything but TABLE_NAME.
    process.env = { ...savedEnv, ...moto.awsEnv, ...res.env, TABLE_NAME: '' };
    const { handler } = await import('../../../functions/worker.js');
    // Act + Assess
    await expect(handler({ Records: [] }, lambdaContext(60_000))).rejects.toThrow(ConfigError);
    await expect(handler({ Records: [] }, lambdaContext(60_000))).rejects.toThrow(/TABLE_NAME/);
  });

  it('reads its configuration from the environment and works a batch with SDK clients of its own', async () => {
    // Prepare
    process.env = {
      ...savedEnv,
      ...moto.awsEnv,
      ...res.env,
      TIME_SCALE: String(TEST_TIME_SCALE),
      LEASE_SECONDS: '60',
      POWERTOOLS_SERVICE_NAME: 'threadgate-worker',
      POWERTOOLS_METRICS_NAMESPACE: 'threadgate-test',
    };
    const { handler } = await import('../../../functions/worker.js');
    const key = `handler-${Date.now().toString(36)}`;
    const pageurl = `${target.url}/form/${key}`;
    await sendJobs(clients.sqs, res.queueUrl, [
      JSON.stringify({ record_key: key, sitekey: target.sitekey, pageurl, submit_url: pageurl }),
    ]);
    const messages = await receiveAll(clients.sqs, res.queueUrl, 1);
    // Act
    const out = await handler(sqsEvent(messages, res.queueArn), lambdaContext(60_000));
    // Assess
    expect(out).toEqual({ batchItemFailures: [] });
    const row = await new OutcomesStore({ client: clients.ddb, tableName: res.tableName }).get(key);
    expect(row).toMatchObject({ status: 'submitted', target_status: 200 });
    expect(
      logs.lines().some((l) => l.service === 'threadgate-worker' && l.function_request_id === 'req-1'),
    ).toBe(true);
    expect(logs.text()).not.toContain(TEST_API_KEY);
  });

  it('refuses an event that is not an SQS event', async () => {
    const { handler } = await import('../../../functions/worker.js');
    await expect(handler({} as never, lambdaContext(60_000))).rejects.toThrow(/SQS event/);
  });
});
