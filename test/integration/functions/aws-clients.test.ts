import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { DynamoDBClient, GetItemCommand } from '@aws-sdk/client-dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  AWS_CONNECTION_TIMEOUT_MS,
  AWS_MAX_ATTEMPTS,
  AWS_REQUEST_TIMEOUT_MS,
  awsClientOptions,
  awsWaitMs,
  MIN_AWS_WAIT_MS,
} from '../../../functions/common/aws-clients.js';

/**
 * The AWS clients' bounds on the wire: an endpoint that takes the request and never answers. The
 * SDK gives the call up after its request timeout (with throwOnRequestTimeout; without it the
 * handler only logs a warning and waits for ever), and tries it AWS_MAX_ATTEMPTS times in all.
 */

let server: Server;
let requests = 0;
let endpoint = '';

beforeAll(async () => {
  server = createServer(() => {
    requests += 1; // never answered
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  endpoint = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(async () => {
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
});

describe('awsClientOptions', () => {
  it('bounds attempts and each attempt’s time, connection included, and turns a passed request timeout into an error', () => {
    expect(awsClientOptions()).toEqual({
      maxAttempts: AWS_MAX_ATTEMPTS,
      requestHandler: {
        requestTimeout: AWS_REQUEST_TIMEOUT_MS,
        connectionTimeout: AWS_CONNECTION_TIMEOUT_MS,
        throwOnRequestTimeout: true,
      },
    });
    expect(AWS_CONNECTION_TIMEOUT_MS).toBeLessThanOrEqual(AWS_REQUEST_TIMEOUT_MS);
  });

  it('scales the waits between tries the same way, floored at MIN_AWS_WAIT_MS and never above the wait itself', () => {
    expect(awsWaitMs(1_000)).toBe(1_000);
    expect(awsWaitMs(1_000, 0.5)).toBe(500);
    expect(awsWaitMs(1_000, 0.01)).toBe(MIN_AWS_WAIT_MS);
    expect(awsWaitMs(20, 0.01)).toBe(20);
    expect(awsWaitMs(1_000, 4)).toBe(1_000);
  });

  it('gives up a call to an endpoint that never answers after its attempts, each cut at the request timeout', async () => {
    // Prepare
    const dynamodb = new DynamoDBClient({
      ...awsClientOptions(),
      endpoint,
      region: 'us-east-1',
      credentials: { accessKeyId: 'testing', secretAccessKey: 'testing' },
    });
    requests = 0;
    // Act
    const failure = await dynamodb
      .send(new GetItemCommand({ TableName: 'ledger', Key: { pk: { S: 'pipeline' }, sk: { S: 'state' } } }))
      .catch((e: unknown) => e);
    // Assess: a timeout error, and exactly the allowed attempts reached the endpoint.
    expect((failure as Error).name).toBe('TimeoutError');
    expect(requests).toBe(AWS_MAX_ATTEMPTS);
  }, 15_000);
});
