import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { REPO_ROOT } from '../../../../local/emulator/deploy.js';
import { LOCALSTACK_IMAGE } from '../../../../local/localstack/health.js';

interface ComposeService {
  image?: string;
  environment?: string[] | Record<string, string>;
  extra_hosts?: string[];
  volumes?: string[];
  ports?: string[];
}

const text = readFileSync(join(REPO_ROOT, 'localstack', 'docker-compose.yml'), 'utf8');
const service = (parse(text) as { services: Record<string, ComposeService> }).services.localstack;

/** The service's environment as a map, from either compose form (list of KEY=VALUE, or a map). */
function environment(): Record<string, string> {
  const env = service?.environment ?? [];
  if (!Array.isArray(env)) return env;
  return Object.fromEntries(
    env.map((entry) => {
      const at = entry.indexOf('=');
      return at < 0 ? [entry, ''] : [entry.slice(0, at), entry.slice(at + 1)];
    }),
  );
}

describe('localstack/docker-compose.yml', () => {
  it('pins the LocalStack image the health check expects (the last community release, no token)', () => {
    expect(service?.image).toBe(LOCALSTACK_IMAGE);
    expect(LOCALSTACK_IMAGE).toBe('localstack/localstack:4.14.0');
    expect(Object.keys(environment())).not.toContain('LOCALSTACK_AUTH_TOKEN');
  });

  it('runs the arm64 functions on the host architecture and skips resource types LocalStack lacks', () => {
    expect(environment()).toMatchObject({
      LAMBDA_IGNORE_ARCHITECTURE: '1',
      CFN_IGNORE_UNSUPPORTED_RESOURCE_TYPES: '1',
    });
  });

  it('lets Lambda containers reach the stand-ins on the host, with the flag unquoted', () => {
    expect(environment().LAMBDA_DOCKER_FLAGS).toBe('--add-host=host.docker.internal:host-gateway');
    expect(service?.extra_hosts).toContain('host.docker.internal:host-gateway');
  });

  it('does not restrict services (a SERVICES list would disable the ones it leaves out)', () => {
    expect(Object.keys(environment())).not.toContain('SERVICES');
  });

  it('publishes the gateway on loopback only and gives LocalStack the Docker socket for Lambda containers', () => {
    expect(service?.ports).toEqual(['127.0.0.1:4566:4566']);
    expect(service?.volumes).toContain('/var/run/docker.sock:/var/run/docker.sock');
  });
});
