import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import {
  checkLocalStack,
  LOCALSTACK_SERVICES,
  LOCALSTACK_VERSION,
  LocalStackUnavailableError,
} from '../../../../local/localstack/health.js';

/** A loopback HTTP server that answers every request with `answer` (or never, for `hang`). */
const servers: Server[] = [];
async function fakeEndpoint(answer: { status?: number; body: string } | 'hang'): Promise<string> {
  const server = createServer((req, res) => {
    if (answer === 'hang') return;
    res.writeHead(answer.status ?? 200, { 'content-type': 'application/json' });
    res.end(req.url === '/_localstack/health' ? answer.body : '{"error":"not found"}');
  });
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

afterEach(async () => {
  for (const server of servers.splice(0)) {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  }
});

function health(version: string, overrides: Record<string, string> = {}, edition = 'community'): string {
  const services = Object.fromEntries(LOCALSTACK_SERVICES.map((s) => [s, 'available']));
  return JSON.stringify({ services: { ...services, kinesis: 'available', ...overrides }, edition, version });
}

async function problemOf(endpoint: string, timeoutMs?: number): Promise<LocalStackUnavailableError> {
  const err = await checkLocalStack(endpoint, { timeoutMs }).then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(LocalStackUnavailableError);
  return err as LocalStackUnavailableError;
}

describe('LocalStack health and version check', () => {
  it('accepts LocalStack 4.14.0 serving every service the stack needs and returns what it read', async () => {
    const endpoint = await fakeEndpoint({ body: health('4.14.0', { sqs: 'running' }) });
    const result = await checkLocalStack(endpoint);
    expect(result.version).toBe('4.14.0');
    expect(result.edition).toBe('community');
    expect(result.services.sqs).toBe('running');
  });

  it('accepts a patch or development build of the same minor version', async () => {
    for (const version of ['4.14.1', '4.14.0.dev12']) {
      const endpoint = await fakeEndpoint({ body: health(version) });
      expect((await checkLocalStack(endpoint)).version).toBe(version);
    }
  });

  it('says LocalStack is not running, and how to start it, when nothing listens on the endpoint', async () => {
    // Prepare: a port that was just free'd.
    const endpoint = await fakeEndpoint({ body: '' });
    const server = servers.pop() as Server;
    await new Promise((resolve) => server.close(resolve));
    // Act
    const err = await problemOf(endpoint);
    // Assess
    expect(err.problem).toBe('not-running');
    expect(err.message).toContain(`LocalStack is not running at ${endpoint}`);
    expect(err.message).toContain('ECONNREFUSED');
    expect(err.message).toContain('docker compose -f localstack/docker-compose.yml up -d');
  });

  it('says LocalStack is not running when the endpoint accepts but never answers', async () => {
    const endpoint = await fakeEndpoint('hang');
    const err = await problemOf(endpoint, 300);
    expect(err.problem).toBe('not-running');
    expect(err.message).toContain('/_localstack/health failed');
  });

  it('says the endpoint is not LocalStack when the health path is missing (moto answers 404)', async () => {
    const endpoint = await fakeEndpoint({ status: 404, body: '<html>not found</html>' });
    const err = await problemOf(endpoint);
    expect(err.problem).toBe('not-localstack');
    expect(err.message).toContain('HTTP 404');
    expect(err.message).toContain('AWS_ENDPOINT_URL');
  });

  it('says the endpoint is not LocalStack when the health answer is not a health document', async () => {
    const endpoint = await fakeEndpoint({ body: '{"status":"ok"}' });
    expect((await problemOf(endpoint)).problem).toBe('not-localstack');
  });

  it('refuses another LocalStack version by name and names the pinned image', async () => {
    const endpoint = await fakeEndpoint({ body: health('2026.3.0', {}, 'pro') });
    const err = await problemOf(endpoint);
    expect(err.problem).toBe('wrong-version');
    expect(err.message).toContain('version 2026.3.0 (pro)');
    expect(err.message).toContain(`written against ${LOCALSTACK_VERSION}`);
    expect(err.message).toContain(`localstack/localstack:${LOCALSTACK_VERSION}`);
  });

  it('refuses an older community release too', async () => {
    const endpoint = await fakeEndpoint({ body: health('3.8.1') });
    expect((await problemOf(endpoint)).problem).toBe('wrong-version');
  });

  it('names each needed service that is disabled, failed or not loaded', async () => {
    // Prepare: a SERVICES list without lambda, and a failed DynamoDB.
    const services = Object.fromEntries(
      LOCALSTACK_SERVICES.filter((s) => s !== 'lambda').map((s) => [s, 'available']),
    );
    const body = JSON.stringify({
      services: { ...services, sqs: 'disabled', dynamodb: 'error' },
      edition: 'community',
      version: '4.14.0',
    });
    const endpoint = await fakeEndpoint({ body });
    // Act
    const err = await problemOf(endpoint);
    // Assess
    expect(err.problem).toBe('services-unavailable');
    expect(err.message).toContain('sqs (disabled), lambda (not loaded), dynamodb (error)');
  });
});
