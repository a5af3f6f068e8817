import { request } from 'undici';

/**
 * The LocalStack that threadgate's LocalStack target is written against, and the check that
 * the endpoint really is that LocalStack before anything is deployed to it.
 *
 * Why 4.14.0 (LocalStack source at tag v4.14.0, github.com/localstack/localstack, paths under
 * localstack-core/localstack/): it is the last community release (26 Feb 2026; the merged 2026.x
 * `latest` image needs LOCALSTACK_AUTH_TOKEN, 4.14.0 only warns: deprecations.py), it has
 * nodejs22.x (services/lambda_/runtimes.py; 3.x does not), and what docs/local-stack.md
 * ("LocalStack") says LocalStack does or does not prove was read from this tag. Another version may behave
 * differently (a 2026.x image refuses to start without a token), so it is refused by name.
 *
 * What the check reads: GET /_localstack/health answers
 * `{"services": {"sqs": "available", ...}, "edition": "community", "version": "4.14.0"}`
 * (HealthResource.on_get in services/internal.py; states from ServiceState in
 * services/plugins.py: "available" and "running" can serve, "starting" not yet; "disabled",
 * "stopped" and "error" never).
 */
export const LOCALSTACK_VERSION = '4.14.0';
export const LOCALSTACK_IMAGE = `localstack/localstack:${LOCALSTACK_VERSION}`;
export const LOCALSTACK_COMPOSE_UP = 'docker compose -f localstack/docker-compose.yml up -d';

/** The services the CDK deploy and the running stack use. */
export const LOCALSTACK_SERVICES = [
  'cloudformation',
  'iam',
  'sts',
  's3',
  'ssm',
  'secretsmanager',
  'sqs',
  'lambda',
  'dynamodb',
  'events',
  'logs',
  'cloudwatch',
] as const;

const SERVING = new Set(['available', 'running']);
/** A health document is a few hundred bytes; anything much larger is not LocalStack's. */
const MAX_HEALTH_BYTES = 256 * 1024;

/** Which piece is missing: the message says what to do about it. */
export type LocalStackProblem = 'not-running' | 'not-localstack' | 'wrong-version' | 'services-unavailable';

export class LocalStackUnavailableError extends Error {
  override name = 'LocalStackUnavailableError';
  constructor(
    readonly problem: LocalStackProblem,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

export interface LocalStackHealth {
  version: string;
  edition: string | undefined;
  services: Record<string, string>;
}

export interface CheckLocalStackOptions {
  /** @default LOCALSTACK_VERSION */
  expectedVersion?: string;
  /** @default LOCALSTACK_SERVICES */
  services?: readonly string[];
  /** For the whole request. @default 5000 */
  timeoutMs?: number;
}

function startHint(): string {
  return `start it with \`${LOCALSTACK_COMPOSE_UP}\` (needs a Docker engine) and wait until /_localstack/health answers`;
}

/** "4.14.0", "4.14.1" and "4.14.0.dev3" are 4.14; the patch level does not change behaviour we rely on. */
function sameMinor(actual: string, expected: string): boolean {
  const [a1, a2] = actual.split('.');
  const [e1, e2] = expected.split('.');
  return a1 === e1 && a2 === e2;
}

async function readHealth(url: string, timeoutMs: number): Promise<{ status: number; text: string }> {
  const res = await request(url, {
    method: 'GET',
    headersTimeout: timeoutMs,
    bodyTimeout: timeoutMs,
    signal: AbortSignal.timeout(timeoutMs),
  });
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of res.body) {
    size += (chunk as Buffer).length;
    if (size > MAX_HEALTH_BYTES) {
      res.body.destroy();
      break;
    }
    chunks.push(chunk as Buffer);
  }
  return { status: res.statusCode, text: Buffer.concat(chunks).toString('utf8') };
}

/**
 * Asks `endpoint`/_localstack/health whether a LocalStack of the expected version is serving
 * every service the stack needs; throws LocalStackUnavailableError naming what is missing.
 */
export async function checkLocalStack(
  endpoint: string,
  options: CheckLocalStackOptions = {},
): Promise<LocalStackHealth> {
  const expected = options.expectedVersion ?? LOCALSTACK_VERSION;
  const wanted = options.services ?? LOCALSTACK_SERVICES;
  const url = new URL('/_localstack/health', endpoint).toString();

  let answer: { status: number; text: string };
  try {
    answer = await readHealth(url, options.timeoutMs ?? 5000);
  } catch (err) {
    const why = (err as { code?: string }).code ?? (err as Error).name ?? String(err);
    throw new LocalStackUnavailableError(
      'not-running',
      `LocalStack is not running at ${endpoint}: GET ${url} failed (${why}); ${startHint()}`,
      { cause: err },
    );
  }

  let body: unknown;
  try {
    body = JSON.parse(answer.text);
  } catch {
    body = undefined;
  }
  const doc = body as { version?: unknown; edition?: unknown; services?: unknown } | undefined;
  if (answer.status !== 200 || typeof doc?.version !== 'string' || typeof doc.services !== 'object') {
    throw new LocalStackUnavailableError(
      'not-localstack',
      `${endpoint} answers, but not as LocalStack: GET ${url} gave HTTP ${answer.status} without a ` +
        `LocalStack health document (another emulator on the port? moto's server has no /_localstack/health); ` +
        `point AWS_ENDPOINT_URL at LocalStack, or ${startHint()}`,
    );
  }

  const edition = typeof doc.edition === 'string' ? doc.edition : undefined;
  if (!sameMinor(doc.version, expected)) {
    throw new LocalStackUnavailableError(
      'wrong-version',
      `LocalStack at ${endpoint} is version ${doc.version}${edition ? ` (${edition})` : ''}, but threadgate's ` +
        `LocalStack target is written against ${expected} (image ${LOCALSTACK_IMAGE}, no auth token needed); ` +
        `stop it and ${startHint()}`,
    );
  }

  const services: Record<string, string> = {};
  for (const [name, state] of Object.entries(doc.services as Record<string, unknown>)) {
    services[name] = String(state);
  }
  const notServing = wanted.filter((name) => !SERVING.has(services[name] ?? 'missing'));
  if (notServing.length > 0) {
    throw new LocalStackUnavailableError(
      'services-unavailable',
      `LocalStack ${doc.version} at ${endpoint} does not serve ${notServing
        .map((name) => `${name} (${services[name] ?? 'not loaded'})`)
        .join(', ')}; a SERVICES list in its environment switches others off (remove it, as ` +
        'localstack/docker-compose.yml does), and services still "starting" need a moment',
    );
  }
  return { version: doc.version, edition, services };
}
