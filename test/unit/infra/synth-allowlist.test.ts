import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { App } from 'aws-cdk-lib';
import { Template } from 'aws-cdk-lib/assertions';
import { describe, expect, it } from 'vitest';
import { ConfigError } from '../../../functions/common/errors.js';
import { isHostAllowlisted, parseAllowlist } from '../../../functions/target/allowlist.js';
import { readWorkerConfig } from '../../../functions/worker/config.js';
import { buildApp } from '../../../infra/app.js';
import { REPO_ROOT } from '../../../local/emulator/deploy.js';

/**
 * Deploy time and run time judge `allowedHosts` with one parser (functions/target/allowlist.ts):
 * an entry synth accepts is one the worker starts with, and one the worker would refuse fails
 * the synth. The app is built from CDK context exactly as `cdk synth -c allowedHosts=…` does.
 */
function synthWith(allowedHosts: string) {
  const app = new App({ context: { allowedHosts, nag: 'false', 'aws:cdk:bundling-stacks': [] } });
  const { stack } = buildApp(app);
  return Template.fromStack(stack);
}

function workerAllowedHosts(template: Template): string {
  const functions = Object.values(template.findResources('AWS::Lambda::Function')) as Array<{
    Properties: { Environment?: { Variables?: Record<string, string> } };
  }>;
  const env = functions
    .map((f) => f.Properties.Environment?.Variables ?? {})
    .find((v) => 'ALLOWED_HOSTS' in v);
  return env?.ALLOWED_HOSTS ?? '';
}

describe('allowedHosts at synth time', () => {
  it.each([
    '[::1]',
    '[::1]:8080',
    '127.0.0.1:8080',
    'forms.example.com',
    '*.staging.example.com',
    'localhost',
  ])('accepts %s, and the worker starts with what was deployed', (entry) => {
    // Act
    const template = synthWith(entry);
    // Assess: the worker's own configuration reader takes the deployed value.
    const deployed = workerAllowedHosts(template);
    expect(deployed).toBe(entry);
    const config = readWorkerConfig({
      TABLE_NAME: 't',
      QUEUE_URL: 'http://localhost/q',
      QUEUE_ARN: 'arn:aws:sqs:us-east-1:1:q',
      DLQ_URL: 'http://localhost/d',
      LEDGER_TABLE: 'l',
      CAPTCHAAI_SECRET_NAME: 's',
      AWS_LAMBDA_FUNCTION_NAME: 'w',
      ALLOWED_HOSTS: deployed,
    });
    expect(config.allowlist).toEqual(parseAllowlist([entry]));
  });

  it.each(['*.com', '*', '*.', 'http://forms.example.com', 'a b', 'forms.example.com/path'])(
    'refuses %s with an error naming allowedHosts, as the worker would refuse it',
    (entry) => {
      expect(() => synthWith(entry)).toThrow(ConfigError);
      expect(() => synthWith(entry)).toThrow(/^allowedHosts: /);
      expect(() => parseAllowlist([entry])).toThrow(/ALLOWED_HOSTS/);
    },
  );

  it('lets [::1] match the target URL the README documents for it', () => {
    const list = parseAllowlist(['[::1]']);
    expect(isHostAllowlisted(new URL('http://[::1]:8932/form').hostname, list)).toBe(true);
  });

  it('fails a real `cdk synth -c allowedHosts=*.com` before anything is built', async () => {
    // Act
    const run = promisify(execFile)(
      'npx',
      ['cdk', 'synth', '--quiet', '-c', 'allowedHosts=*.com', '-o', '/tmp/threadgate-synth-refused'],
      {
        cwd: REPO_ROOT,
        env: { ...process.env, CDK_DISABLE_VERSION_CHECK: '1' },
      },
    );
    // Assess
    await expect(run).rejects.toMatchObject({
      code: expect.any(Number),
      stderr: expect.stringMatching(/allowedHosts: "\*\.com" is not a valid \*\.suffix entry/),
    });
  }, 120_000);
});
