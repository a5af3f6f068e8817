import { ListSecretsCommand } from '@aws-sdk/client-secrets-manager';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { MotoServer } from '../../../local/emulator/moto.js';
import { LocalStackUnavailableError } from '../../../local/localstack/health.js';
import {
  deployToLocalStack,
  localStackSettings,
  localStackTargetConfig,
} from '../../../local/localstack/target.js';
import { type AwsClients, clientsFor, startMoto } from '../../fixtures/aws.js';

describe('LocalStack target configuration', () => {
  it("defaults to LocalStack's endpoint, the Docker host and the fixed stand-in ports", () => {
    const config = localStackTargetConfig({});
    expect(config.awsEnv).toEqual({
      AWS_ENDPOINT_URL: 'http://localhost:4566',
      AWS_REGION: 'us-east-1',
      AWS_ACCESS_KEY_ID: 'test',
      AWS_SECRET_ACCESS_KEY: 'test',
    });
    expect(config).toMatchObject({
      standinHost: 'host.docker.internal',
      captchaPort: 8931,
      targetPort: 8932,
    });
    expect(localStackSettings(config)).toEqual({
      captchaaiUrl: 'http://host.docker.internal:8931',
      allowedHosts: ['host.docker.internal'],
    });
  });

  it('takes the endpoint, host and ports from the environment', () => {
    const config = localStackTargetConfig({
      AWS_ENDPOINT_URL: 'http://127.0.0.1:4599',
      THREADGATE_STANDIN_HOST: '172.17.0.1',
      THREADGATE_STANDIN_PORT: '9001',
      THREADGATE_TARGET_PORT: '9002',
      THREADGATE_STACK: 'Mine',
    });
    expect(config.awsEnv.AWS_ENDPOINT_URL).toBe('http://127.0.0.1:4599');
    expect(config).toMatchObject({
      standinHost: '172.17.0.1',
      captchaPort: 9001,
      targetPort: 9002,
      stackName: 'Mine',
    });
    expect(localStackSettings(config).captchaaiUrl).toBe('http://172.17.0.1:9001');
  });

  it('names the variable when a stand-in port is not a port', () => {
    expect(() => localStackTargetConfig({ THREADGATE_STANDIN_PORT: 'abc' })).toThrow(
      'THREADGATE_STANDIN_PORT: must be a TCP port (1-65535), got "abc"',
    );
  });
});

describe('deploying to the LocalStack target', () => {
  let moto: MotoServer;
  let clients: AwsClients;
  beforeAll(async () => {
    moto = await startMoto();
    clients = clientsFor(moto);
  });
  afterAll(async () => {
    await moto?.stop();
  });

  it('refuses an endpoint that is not LocalStack before creating the secret or deploying anything', async () => {
    // Prepare: AWS_ENDPOINT_URL points at moto's server, an AWS emulator but not LocalStack.
    const config = localStackTargetConfig({ AWS_ENDPOINT_URL: moto.endpoint });
    // Act
    const err = await deployToLocalStack({
      config,
      settings: { stackName: 'Threadgate', ...localStackSettings(config) },
      logFile: '/dev/null',
    }).catch((e: unknown) => e);
    // Assess
    expect(err).toBeInstanceOf(LocalStackUnavailableError);
    expect((err as LocalStackUnavailableError).problem).toBe('not-localstack');
    expect((await clients.secrets.send(new ListSecretsCommand({}))).SecretList ?? []).toEqual([]);
  });
});
