import { execFileSync, type SpawnOptions, spawn } from 'node:child_process';
import {
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { paginateQuery } from '@aws-sdk/lib-dynamodb';
import { App } from 'aws-cdk-lib';
import { Template } from 'aws-cdk-lib/assertions';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BATCH_INDEX_NAME, batchShardsOf } from '../../../functions/records/batch-index.js';
import { PACKAGE_ROOT, VERSION } from '../../../infra/package-root.js';
import { ThreadgateStack } from '../../../infra/threadgate-stack.js';
import type { LocalStack } from '../../../local/stack/local-stack.js';
import { goodRecord } from '../../../local/stack/records.js';
import { startE2eStack, uniquePrefix } from '../../e2e/harness.js';
import { deliveryInvariants, type TemplateJson } from '../../fixtures/template-invariants.js';

/**
 * README's "Start here", run as written from a clean copy of the repository (its tracked and
 * unignored files, no node_modules, no dist): the build block (`npm ci && npm pack`, `pip
 * wheel`) in the copy; the platform team's `npm install` of the tarball in a consumer project
 * beside it (with only aws-cdk-lib, constructs and cdk-nag there), its CDK snippet with the
 * three roles' grants synthesized under cdk-nag, and `threadgate secret set`; the operator's
 * global install and `threadgate status`; the data engineer's wheel install and one-liner with
 * README's job line, against the stack deployed to moto. The one line not run is `npx cdk
 * deploy` (the harness deploys the same construct to moto). No IAM-checking emulator: the
 * boto3 calls the one-liner makes are recorded and each must be allowed by the grant README
 * gives the data job, in the synthesized policy. Then the wheel's API at large.
 */
const LIBS = ['aws-cdk-lib', 'constructs', 'cdk-nag'].map(
  (name) =>
    `${name}@${JSON.parse(readFileSync(`${PACKAGE_ROOT}node_modules/${name}/package.json`, 'utf8')).version}`,
);

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

function run(command: string, args: string[], options: SpawnOptions & { input?: string } = {}): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { stdio: ['pipe', 'pipe', 'pipe'], ...options });
    let stdout = '';
    let stderr = '';
    child.stdout?.on('data', (d) => {
      stdout += d;
    });
    child.stderr?.on('data', (d) => {
      stderr += d;
    });
    child.stdin?.end(options.input ?? '');
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

async function ok(command: string, args: string[], options: SpawnOptions = {}): Promise<Run> {
  const result = await run(command, args, options);
  if (result.code !== 0)
    throw new Error(`${command} ${args.join(' ')} exited ${result.code}:\n${result.stderr}`);
  return result;
}

/** An environment without the checkout: no NODE_PATH, no npm_* variables of the test run. */
function cleanEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (k !== 'NODE_PATH' && !k.startsWith('npm_') && !k.startsWith('VITEST')) env[k] = v;
  }
  return { ...env, ...extra };
}

const README = readFileSync(`${PACKAGE_ROOT}README.md`, 'utf8');
const START_HERE = README.slice(
  README.indexOf('## Start here'),
  README.indexOf('\n## ', README.indexOf('## Start here') + 1),
);
/** README's "Start here" code blocks of one language, in order. */
const blocks = (lang: string) =>
  [...START_HERE.matchAll(new RegExp(`\`\`\`${lang}\n([\\s\\S]*?)\`\`\``, 'g'))].map((m) => m[1] as string);
const [BUILD, PLATFORM, OPERATOR, DATA] = blocks('sh') as [string, string, string, string];
const CDK_SNIPPET = blocks('ts')[0] ?? '';
const JOB_LINE = (blocks('json')[0] ?? '').trim();
/** The stack name README's commands use, replaced by the deployed one. */
const README_STACK = 'MyAppStack';

/** A consumer's CDK app around README's snippet: its import, its construct and grants, and the roles it names. */
const CONSUMER_APP = `import { App, Stack, Validations } from 'aws-cdk-lib';
import * as iam from 'aws-cdk-lib/aws-iam';
import { AwsSolutionsChecks } from 'cdk-nag';
${CDK_SNIPPET.split('\n')
  .filter((l) => l.startsWith('import '))
  .join('\n')}

const app = new App({ outdir: 'cdk.out' });
const stack = new Stack(app, 'ConsumerStack');
const role = (id) => new iam.Role(stack, id, { assumedBy: new iam.ServicePrincipal('ecs-tasks.amazonaws.com') });
const jobRole = role('JobRole');
const opsRole = role('OpsRole');
${CDK_SNIPPET.split('\n')
  .filter((l) => !l.startsWith('import '))
  .join('\n')
  .replace(/new Threadgate\(this,/, 'new Threadgate(stack,')}
Validations.of(app).addPlugins(new AwsSolutionsChecks(app));
app.synth();
`;

/** Records the AWS calls of a Python process (boto3's before-call event) as IAM actions. */
const RECORD_CALLS = `import atexit, json, os
if os.environ.get("TG_CALLS"):
    import boto3
    boto3.setup_default_session()
    _calls = set()
    _batch = {"SendMessageBatch": "SendMessage", "DeleteMessageBatch": "DeleteMessage"}
    def _record(model, **kwargs):
        _calls.add(model.service_model.signing_name + ":" + _batch.get(model.name, model.name))
    boto3.DEFAULT_SESSION.events.register("before-call", _record)
    atexit.register(lambda: open(os.environ["TG_CALLS"], "w").write(json.dumps(sorted(_calls))))
`;

/** Copies the repository as a clone has it: tracked and unignored files only. */
function cleanCopy(to: string): void {
  const files = execFileSync('git', ['ls-files', '-z', '--cached', '--others', '--exclude-standard'], {
    cwd: PACKAGE_ROOT,
    encoding: 'utf8',
  })
    .split('\0')
    .filter((f) => f && existsSync(join(PACKAGE_ROOT, f)));
  for (const f of files) {
    mkdirSync(dirname(join(to, f)), { recursive: true });
    cpSync(join(PACKAGE_ROOT, f), join(to, f));
  }
}

/** Every action a role's policies allow in a synthesized template. */
function actionsOf(
  template: { Resources: Record<string, { Type: string; Properties: Record<string, unknown> }> },
  role: string,
) {
  return Object.values(template.Resources)
    .filter((r) => r.Type === 'AWS::IAM::Policy' && JSON.stringify(r.Properties.Roles).includes(role))
    .flatMap((r) => (r.Properties.PolicyDocument as { Statement: { Action: string | string[] }[] }).Statement)
    .flatMap((st) => [st.Action].flat());
}

describe('the packages, installed outside the checkout', () => {
  let work: string;
  let project: string;
  let stack: LocalStack;
  let venvPython: string;

  let clone: string;
  let npmEnv: NodeJS.ProcessEnv;

  beforeAll(async () => {
    work = mkdtempSync(join(tmpdir(), 'threadgate-install-'));
    clone = join(work, 'threadgate');
    project = join(work, 'consumer');
    mkdirSync(project);
    cleanCopy(clone);
    // README's build block, as written, in the clean copy (npm preferring its cache).
    npmEnv = cleanEnv({
      npm_config_prefer_offline: 'true',
      npm_config_audit: 'false',
      npm_config_fund: 'false',
    });
    await ok('bash', ['-e', '-c', BUILD], { cwd: clone, env: npmEnv });
    // The deployment (it needs no package) runs while the consumer project installs and the venv
    // is made; started before the build, the stack idled through it (about 2 min).
    const started = startE2eStack('install');
    writeFileSync(
      join(project, 'package.json'),
      JSON.stringify({ name: 'consumer', private: true, type: 'module' }),
    );
    await ok('npm', ['install', '--prefer-offline', '--no-audit', '--no-fund', ...LIBS], {
      cwd: project,
      env: npmEnv,
    });
    // The platform team's install, as README writes it.
    await ok('bash', ['-e', '-c', PLATFORM.split('\n')[0] ?? ''], { cwd: project, env: npmEnv });
    const venv = join(work, 'venv');
    await ok('python3', ['-m', 'venv', '--system-site-packages', venv]);
    venvPython = join(venv, 'bin', 'python');
    stack = await started;
  }, 900_000);

  afterAll(async () => {
    await stack?.stop();
    if (work) rmSync(work, { recursive: true, force: true });
  });

  it('synthesizes a consumer app with the Threadgate construct under cdk-nag, with the invariants of this repository', async () => {
    // Act
    await ok(process.execPath, ['--input-type=module', '-e', CONSUMER_APP], {
      cwd: project,
      env: cleanEnv(),
    });
    // Assess: nag found nothing (synth would have failed) and the template holds what ours does.
    const template = JSON.parse(
      readFileSync(join(project, 'cdk.out', 'ConsumerStack.template.json'), 'utf8'),
    );
    // Ours with README's lanes (the example sets them for a production plan).
    const lanes = Number(/\blanes: (\d+)/.exec(CDK_SNIPPET)?.[1] ?? 1);
    const ours = new ThreadgateStack(new App({ context: { 'aws:cdk:bundling-stacks': [] } }), 'Threadgate', {
      settings: { allowedHosts: ['forms.example.com'], lanes },
    });
    expect(deliveryInvariants(template as TemplateJson)).toEqual(
      deliveryInvariants(Template.fromStack(ours).toJSON() as TemplateJson),
    );
    // README's grants reached the roles: the data job's and the operator's.
    expect(actionsOf(template, 'JobRole')).toEqual(
      expect.arrayContaining(['sqs:SendMessage', 'dynamodb:GetItem']),
    );
    expect(actionsOf(template, 'OpsRole')).toEqual(
      expect.arrayContaining(['lambda:UpdateEventSourceMapping']),
    );
    // The prebundled functions, not a bundling step, made the assets.
    expect(readdirSync(join(project, 'cdk.out')).filter((f) => f.startsWith('asset.'))).toHaveLength(3);
  }, 120_000);

  it('runs the installed threadgate: --version, --help and status against the deployed stack', async () => {
    const bin = join(project, 'node_modules', '.bin', 'threadgate');
    const env = cleanEnv({ ...stack.awsEnv, THREADGATE_STACK: stack.stackName });
    // Act
    const version = await run(bin, ['--version'], { cwd: project, env });
    const help = await run(bin, ['--help'], { cwd: project, env });
    const status = await run(bin, ['status', '--json'], { cwd: project, env });
    const local = await run(bin, ['local'], { cwd: project, env });
    // Assess
    expect(version).toMatchObject({ code: 0, stdout: `${VERSION}\n` });
    expect(help.code).toBe(0);
    for (const command of ['enqueue', 'status', 'outcomes', 'wait', 'pause', 'resume', 'redrive', 'secret']) {
      expect(help.stdout).toContain(`  ${command} `);
    }
    expect(status.stderr).toBe('');
    expect(status.code).toBe(0);
    expect(JSON.parse(status.stdout).resources.queueUrl).toBe(stack.outputs.QueueUrl);
    expect(local.code).not.toBe(0);
    expect(local.stderr).toMatch(/development command: it runs from a checkout/);
  }, 120_000);

  it("runs README's platform and operator commands: secret set from the consumer app, a global install and status", async () => {
    const env: NodeJS.ProcessEnv = {
      ...npmEnv,
      ...cleanEnv(stack.awsEnv),
      npm_config_prefix: join(work, 'global'),
    };
    env.PATH = `${join(work, 'global', 'bin')}:${env.PATH}`;
    // The key the stand-in knows, so storing it leaves the deployed pipeline working.
    writeFileSync(join(project, 'captchaai-key.txt'), stack.apiKey, { mode: 0o600 });
    const secretSet = (PLATFORM.split('\n')[1] ?? '').split(' && ')[0] ?? '';
    expect(secretSet).toMatch(/^npx threadgate secret set /);
    // Act
    const secret = await run('bash', ['-e', '-c', secretSet], { cwd: project, env });
    await ok('bash', ['-e', '-c', OPERATOR.split('\n')[0] ?? ''], { cwd: project, env });
    const status = await run(
      'bash',
      ['-e', '-c', (OPERATOR.split('\n')[1] ?? '').replace(README_STACK, stack.stackName)],
      {
        cwd: work,
        env,
      },
    );
    // Assess
    expect(secret.stderr).not.toContain(stack.apiKey);
    expect(secret.code).toBe(0);
    expect(status.code, status.stderr).toBe(0);
    expect(status.stdout).toMatch(new RegExp(`^stack +${stack.stackName}$`, 'm'));
    expect(existsSync(join(work, 'global', 'lib', 'node_modules', 'threadgate', 'dist'))).toBe(true);
  }, 300_000);

  it("runs the data engineer's one-liner with README's job line, under the grant README gives the data job", async () => {
    // Prepare: README's job line for the target stand-in (its origin and sitekey), the call recorder.
    const data = join(work, 'data');
    mkdirSync(join(data, 'hook'), { recursive: true });
    const sitekey = /"sitekey": "([^"]+)"/.exec(JOB_LINE)?.[1] ?? '';
    writeFileSync(
      join(data, 'jobs.jsonl'),
      `${JOB_LINE.replaceAll('https://forms.example.com', stack.site.url).replace(sitekey, stack.site.sitekey)}\n`,
    );
    writeFileSync(join(data, 'hook', 'sitecustomize.py'), RECORD_CALLS);
    const env = cleanEnv({ ...stack.awsEnv, PYTHONPATH: join(data, 'hook') });
    env.PATH = `${dirname(venvPython)}:${env.PATH}`;
    const [install, ...oneLiner] = DATA.split('\n');
    // Act: the wheel's install as written, then the one-liner with its AWS calls recorded.
    await ok('bash', ['-e', '-c', install ?? ''], { cwd: data, env });
    // README's install makes its own virtual environment (.venv): the wheel is there, for the next test too.
    venvPython = join(data, '.venv', 'bin', 'python');
    const result = await run(
      'bash',
      ['-e', '-c', oneLiner.join('\n').replaceAll(README_STACK, stack.stackName)],
      {
        cwd: data,
        env: { ...env, TG_CALLS: join(data, 'calls.json') },
      },
    );
    // Assess: the record was sent and submitted, and the data job's grant allows every call made.
    expect(result.stderr).toBe('');
    expect(result.code).toBe(0);
    expect(result.stdout.trim()).toBe("[] {'submitted': 1}");
    const calls: string[] = JSON.parse(readFileSync(join(data, 'calls.json'), 'utf8'));
    expect(calls).toEqual(
      expect.arrayContaining([
        'cloudformation:DescribeStacks',
        'sqs:SendMessage',
        'dynamodb:Query',
        'dynamodb:GetItem',
      ]),
    );
    const template = JSON.parse(
      readFileSync(join(project, 'cdk.out', 'ConsumerStack.template.json'), 'utf8'),
    );
    const granted = actionsOf(template, 'JobRole');
    expect(calls.filter((c) => !granted.includes(c))).toEqual([]);
  }, 360_000);

  it('sends a batch from the installed Python package (duplicates, invalid records), waits for it and reads it back', async () => {
    // Prepare: six records, two of them sent twice in the call and once more after, two invalid.
    const batch = uniquePrefix('wheel');
    const good = Array.from({ length: 6 }, (_, i) =>
      JSON.parse(goodRecord(stack.site.url, stack.site.sitekey, `${batch}-${i}`, i)),
    );
    const invalid = [
      { ...good[0], record_key: `${batch} spaced` },
      { ...good[1], record_key: `${batch}-nosubmit`, submit_url: undefined },
    ].map((r) => JSON.parse(JSON.stringify(r)));
    const program = `
import json, sys
import threadgate_producer as tg
good, invalid, batch, stack = json.loads(sys.stdin.read())
out = tg.stack_outputs(stack)
first = tg.send(out["QueueUrl"], good + good[:2] + invalid, batch_id=batch)
again = tg.send(out["QueueUrl"], good[4:], batch_id=batch)
done = tg.wait(out["TableName"], batch, expect=len(first.keys), timeout_s=300, interval_s=1,
               state_table=out["LedgerTableName"])
keys = tg.key_outcomes(out["TableName"], [r["record_key"] for r in good] + [invalid[1]["record_key"]])
print(json.dumps({"version": tg.__version__, "file": tg.__file__,
  "sent": [first.sent, again.sent], "keys": sorted(first.keys),
  "refused": [[r.index, r.record_key, r.reasons] for r in first.refused],
  "counts": done.counts, "end": done.end, "exit": done.exit_code,
  "batch": sorted(r["record_key"] for r in tg.batch_outcomes(out["TableName"], batch)), "byKey": sorted(keys)}))
`;
    // Act: from outside the checkout, so only the installed wheel can be imported.
    const result = await run(venvPython, ['-c', program], {
      cwd: work,
      env: cleanEnv(stack.awsEnv),
      input: JSON.stringify([good, invalid, batch, stack.stackName]),
    });
    // Assess
    expect(result.stderr).toBe('');
    expect(result.code).toBe(0);
    const out = JSON.parse(result.stdout);
    expect(out.version).toBe(VERSION);
    expect(out.file).toContain(dirname(dirname(venvPython))); // the installed wheel, not the checkout
    expect(out.sent).toEqual([8, 2]);
    const schema = JSON.parse(readFileSync(`${PACKAGE_ROOT}schema/job.schema.json`, 'utf8'));
    expect(out.refused).toEqual([
      [8, `${batch} spaced`, [`record_key: must match ${schema.properties.record_key.pattern}`]],
      [9, `${batch}-nosubmit`, [schema.required.includes('submit_url') ? 'submit_url: is required' : '?']],
    ]);
    const keys = good.map((r) => r.record_key as string).sort();
    expect(out.keys).toEqual(keys);
    expect(out.batch).toEqual(keys);
    expect(out.byKey).toEqual(keys); // the refused record never reached the queue
    // The counts wait() gives are the table's, and the exit code follows them.
    const table: Record<string, number> = {};
    for (const shard of batchShardsOf(batch)) {
      for await (const page of paginateQuery(
        { client: stack.documents },
        {
          TableName: stack.outputs.TableName,
          IndexName: BATCH_INDEX_NAME,
          KeyConditionExpression: 'batch_shard = :b',
          ExpressionAttributeValues: { ':b': shard },
        },
      )) {
        for (const row of page.Items ?? []) table[row.status] = (table[row.status] ?? 0) + 1;
      }
    }
    expect(out.counts).toEqual(table);
    expect(out.end).toBe('done');
    expect(out.exit).toBe((table.failed ?? 0) + (table.rejected ?? 0) > 0 ? 2 : 0);
  }, 360_000);
});
