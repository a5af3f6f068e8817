import { createServer, request, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { GetFunctionConfigurationCommand } from '@aws-sdk/client-lambda';
import { GetSecretValueCommand } from '@aws-sdk/client-secrets-manager';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { REPO_ROOT } from '../../../local/emulator/deploy.js';
import type { MotoServer } from '../../../local/emulator/moto.js';
import { LOCALSTACK_SERVICES } from '../../../local/localstack/health.js';
import { type LocalStack, startLocalStack } from '../../../local/stack/local-stack.js';
import { clientsFor, startMoto } from '../../fixtures/aws.js';

/**
 * The LocalStack target's deploy path, run for real without Docker: a loopback shim answers
 * /_localstack/health as LocalStack 4.14.0 would and passes every other request to moto's
 * server. Everything after the health check is the real thing against an AWS emulator: the
 * account from STS, the secret, `cdk bootstrap`, `cdk deploy` with AWS_ENDPOINT_URL, the stack
 * outputs, and the stand-ins on fixed ports of all interfaces. What only LocalStack can do
 * (run the functions in containers) is the e2e suite's job with THREADGATE_E2E_TARGET=localstack.
 */
async function healthShim(moto: MotoServer): Promise<Server> {
  const health = JSON.stringify({
    services: Object.fromEntries(LOCALSTACK_SERVICES.map((s) => [s, 'available'])),
    edition: 'community',
    version: '4.14.0',
  });
  const server = createServer((req, res) => {
    if (req.method === 'GET' && req.url === '/_localstack/health') {
      res.writeHead(200, { 'content-type': 'application/json' }).end(health);
      return;
    }
    const upstream = request(
      { host: '127.0.0.1', port: moto.port, method: req.method, path: req.url, headers: req.headers },
      (answer) => {
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(res);
      },
    );
    upstream.on('error', () => res.destroy());
    req.pipe(upstream);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return server;
}

/** A port that was free a moment ago (the target needs fixed ports, chosen before binding). */
async function freePort(): Promise<number> {
  const probe = createServer();
  await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', resolve));
  const { port } = probe.address() as AddressInfo;
  await new Promise((resolve) => probe.close(resolve));
  return port;
}

describe('LocalStack target deploy path (moto behind a LocalStack health shim)', () => {
  let moto: MotoServer;
  let shim: Server;
  let stack: LocalStack;
  const saved = { ...process.env };
  let captchaPort: number;

  beforeAll(async () => {
    moto = await startMoto();
    shim = await healthShim(moto);
    captchaPort = await freePort();
    Object.assign(process.env, {
      AWS_ENDPOINT_URL: `http://localhost:${(shim.address() as AddressInfo).port}`,
      AWS_ACCESS_KEY_ID: 'testing',
      AWS_SECRET_ACCESS_KEY: 'testing',
      THREADGATE_STANDIN_PORT: String(captchaPort),
      THREADGATE_TARGET_PORT: String(await freePort()),
      THREADGATE_LOCALSTACK_API_KEY: 'localstack-path-key',
    });
    stack = await startLocalStack({
      target: 'localstack',
      logDir: join(REPO_ROOT, '.local-stack', 'e2e', 'localstack-target-deploy'),
    });
  }, 300_000);

  afterAll(async () => {
    await stack?.stop();
    process.env = saved;
    await new Promise((resolve) => (shim ? shim.close(resolve) : resolve(undefined)));
    await moto?.stop();
  });

  it('creates the secret, deploys the stack and reads its outputs back through AWS_ENDPOINT_URL', async () => {
    const clients = clientsFor(moto);
    const secret = await clients.secrets.send(
      new GetSecretValueCommand({ SecretId: stack.outputs.SecretName }),
    );
    expect(secret.SecretString).toBe('localstack-path-key');
    expect(stack.target).toBe('localstack');
    expect(stack.runtime).toBeUndefined();
    expect(stack.outputs.QueueUrl).toBeTruthy();
    expect(stack.deploy?.stackName).toBe('Threadgate');
  });

  it('points the functions at the stand-ins through the Docker host and allowlists only that host', async () => {
    const conf = await clientsFor(moto).lambda.send(
      new GetFunctionConfigurationCommand({ FunctionName: stack.outputs.WorkerFunctionName }),
    );
    const env = conf.Environment?.Variables ?? {};
    expect(env.CAPTCHAAI_URL).toBe(`http://host.docker.internal:${captchaPort}`);
    expect(env.ALLOWED_HOSTS).toBe('host.docker.internal');
    expect(stack.site.url).toBe(`http://host.docker.internal:${process.env.THREADGATE_TARGET_PORT}`);
  });

  it('binds the stand-ins on all interfaces at the fixed ports, so containers can reach them', () => {
    expect(stack.captcha.port).toBe(captchaPort);
    expect(stack.captcha.url).toMatch(new RegExp(`:${captchaPort}$`));
  });
});
