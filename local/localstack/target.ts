import { GetCallerIdentityCommand, STSClient } from '@aws-sdk/client-sts';
import { clientConfig, type DeployResult, deployToEmulator, type StackSettings } from '../emulator/deploy.js';
import { checkLocalStack, type LocalStackHealth } from './health.js';

/**
 * The local stack's `target: 'localstack'` mode: the same CDK app deployed to a LocalStack that
 * someone started with localstack/docker-compose.yml, which then runs the functions itself (in
 * Docker containers; the local runtime stays off). Nothing here needs Docker on this side, only
 * LocalStack's endpoint.
 *
 * Order: the health/version check first (a clear error naming what is missing, before a CDK
 * deploy fails somewhere in its output), then the API-key secret (the stack refers to it by name,
 * so it must exist before the functions read it), then `cdk bootstrap` and `cdk deploy` with
 * AWS_ENDPOINT_URL. That is what `cdklocal` does, minus its S3 endpoint rewrite: the CDK CLI
 * already uses path-style S3 addressing for a loopback endpoint (aws-cdk's `forceS3PathStyle`),
 * which LocalStack's S3 serves on localhost:4566. LocalStack accepts stack updates, so a second
 * run redeploys in place (a no-op when nothing changed).
 *
 * Inside the containers the functions' AWS SDK clients reach LocalStack without any setting of
 * ours: LocalStack puts AWS_ENDPOINT_URL into every function's environment unless
 * LAMBDA_DISABLE_AWS_ENDPOINT_URL is set (services/lambda_/invocation/execution_environment.py
 * at v4.14.0), and the SDK for JavaScript v3 reads it.
 */

/** The host name Lambda containers use for the Docker host (compose: LAMBDA_DOCKER_FLAGS --add-host). */
export const DOCKER_HOST_NAME = 'host.docker.internal';

export interface LocalStackTargetConfig {
  awsEnv: Record<string, string>;
  /** The API key the stand-in accepts and the secret holds. */
  apiKey: string;
  /** Where the functions find the stand-ins: the Docker host, as the containers name it. */
  standinHost: string;
  captchaPort: number;
  targetPort: number;
  /** Stack name to deploy or reuse. */
  stackName: string | undefined;
}

function numberFrom(env: NodeJS.ProcessEnv, name: string, fallback: number): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isInteger(value) || value < 1 || value > 65_535) {
    throw new Error(`${name}: must be a TCP port (1-65535), got "${raw}"`);
  }
  return value;
}

/**
 * Read once from the environment: the endpoint (AWS_ENDPOINT_URL, default LocalStack's
 * http://localhost:4566), the fixed stand-in ports the deployed stack is pointed at, and the key.
 */
export function localStackTargetConfig(env: NodeJS.ProcessEnv = process.env): LocalStackTargetConfig {
  return {
    awsEnv: {
      AWS_ENDPOINT_URL: env.AWS_ENDPOINT_URL || 'http://localhost:4566',
      AWS_REGION: env.AWS_REGION || 'us-east-1',
      // LocalStack accepts any credentials; `test` maps to its default account 000000000000.
      AWS_ACCESS_KEY_ID: env.AWS_ACCESS_KEY_ID || 'test',
      AWS_SECRET_ACCESS_KEY: env.AWS_SECRET_ACCESS_KEY || 'test',
    },
    apiKey: env.THREADGATE_LOCALSTACK_API_KEY || 'threadgate-localstack-key',
    standinHost: env.THREADGATE_STANDIN_HOST || DOCKER_HOST_NAME,
    captchaPort: numberFrom(env, 'THREADGATE_STANDIN_PORT', 8931),
    targetPort: numberFrom(env, 'THREADGATE_TARGET_PORT', 8932),
    stackName: env.THREADGATE_STACK || undefined,
  };
}

/**
 * Stack settings for LocalStack on top of the local stack's own: the functions reach the
 * CaptchaAI stand-in and the target forms through the Docker host, so that host (and only
 * it) is allowlisted; it resolves to a private address, which the allowlist refuses unless
 * the exact host is listed.
 */
export function localStackSettings(config: LocalStackTargetConfig): {
  captchaaiUrl: string;
  allowedHosts: string[];
} {
  return {
    captchaaiUrl: `http://${config.standinHost}:${config.captchaPort}`,
    allowedHosts: [config.standinHost],
  };
}

export interface LocalStackDeploy {
  health: LocalStackHealth;
  deploy: DeployResult;
}

/** Health/version check, secret, bootstrap and deploy; the outputs come back in `deploy`. */
export async function deployToLocalStack(options: {
  config: LocalStackTargetConfig;
  settings: StackSettings;
  logFile: string;
  freshSynth?: boolean;
  onPhase?: (message: string) => void;
}): Promise<LocalStackDeploy> {
  const { awsEnv } = options.config;
  const phase = options.onPhase ?? (() => undefined);
  phase(`checking LocalStack at ${awsEnv.AWS_ENDPOINT_URL}`);
  const health = await checkLocalStack(awsEnv.AWS_ENDPOINT_URL ?? '');
  const identity = await new STSClient(clientConfig(awsEnv)).send(new GetCallerIdentityCommand({}));
  phase(`deploying the CDK app to LocalStack ${health.version} (Lambda containers start on first use)`);
  const deploy = await deployToEmulator({
    awsEnv,
    apiKey: options.config.apiKey,
    settings: options.settings,
    logFile: options.logFile,
    freshSynth: options.freshSynth,
    account: identity.Account,
  });
  return { health, deploy };
}
