import { spawnSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { Command } from 'commander';
import { describe, expect, it } from 'vitest';
import { registerLoad } from '../../../cli/commands/load.js';
import { validateJobMessage } from '../../../functions/records/job-schema.js';
import { PACKAGE_ROOT } from '../../../infra/package-root.js';

/**
 * Figures and lists quoted in more than one place come from one source: the load run's wall
 * time from the run docs/load.md records, the acknowledged cdk-nag findings from
 * infra/constructs/nag-acknowledgements.ts.
 */
const read = (path: string) => readFileSync(`${PACKAGE_ROOT}${path}`, 'utf8');

describe('quoted figures', () => {
  it("quotes the recorded load run's wall time in `threadgate load --help`", () => {
    const wall = /\n {2}wall ([\d.]+) s /.exec(read('docs/load.md'))?.[1];
    expect(wall).toBeDefined();
    const program = new Command('threadgate');
    registerLoad(program);
    let help = '';
    const load = program.commands.find((c) => c.name() === 'load')!;
    load.configureOutput({ writeOut: (s) => (help += s) });
    load.outputHelp();
    expect(help).toMatch(new RegExp(`took\\s+${wall!.replace('.', '\\.')} s`));
  });
});

describe('docs/security.md', () => {
  it('lists every cdk-nag finding infra/constructs/nag-acknowledgements.ts acknowledges, and no other', () => {
    const code = read('infra/constructs/nag-acknowledgements.ts');
    const ids = [...code.matchAll(/id: 'AwsSolutions::([^']+)'/g)].map((m) => m[1] as string);
    const doc = read('docs/security.md');
    const listed = [...doc.matchAll(/^- `(AwsSolutions-[^`]+)` on /gm)].map((m) => m[1] as string);
    expect(listed).toEqual(ids);
  });
});

describe('docs/producers.md', () => {
  it('has a minimal real jobs.jsonl whose lines the job schema accepts', () => {
    const doc = read('docs/producers.md');
    const section = doc.slice(doc.indexOf('### A minimal real `jobs.jsonl`'));
    const block = /```json\n([\s\S]*?)```/.exec(section)?.[1] ?? '';
    const lines = block.trim().split('\n');
    expect(lines.length).toBeGreaterThanOrEqual(2);
    for (const line of lines) expect(validateJobMessage(line)).toMatchObject({ ok: true });
  });

  it('has a job line with an expect block for a 200 page, a redirect and a JSON API, each valid', () => {
    const doc = read('docs/producers.md');
    const section = doc.slice(doc.indexOf('### Did the form accept it? (`expect`)'));
    const block = /```json\n([\s\S]*?)```/.exec(section)?.[1] ?? '';
    const jobs = block
      .trim()
      .split('\n')
      .map((line) => validateJobMessage(line));
    expect(jobs.map((j) => (j.ok ? Object.keys(j.job.expect ?? {}).sort() : j.reason))).toEqual([
      ['body_excludes', 'body_includes', 'status'],
      ['location', 'status'],
      ['body_excludes', 'body_includes', 'status'],
    ]);
  });
});

describe('README and docs/', () => {
  it('keeps README to about 150 lines, its Python one-liner valid Python', () => {
    const readme = read('README.md');
    expect(readme.split('\n').length).toBeLessThanOrEqual(150);
    const code = /python3 -c '([^']*)'/.exec(readme)?.[1] ?? '';
    expect(code).toContain('tg.wait(');
    const parsed = spawnSync('python3', ['-c', 'import ast, sys; ast.parse(sys.stdin.read())'], {
      input: code,
      encoding: 'utf8',
    });
    expect(parsed.stderr).toBe('');
    expect(parsed.status).toBe(0);
  });

  it.each(readdirSync(`${PACKAGE_ROOT}docs`).filter((f) => f.endsWith('.md')))(
    'docs/%s says who it is for in its first lines',
    (page) => {
      const head = read(`docs/${page}`).split('\n').slice(0, 8).join('\n');
      expect(head).toMatch(/\*\*For:\*\* /);
    },
  );
});
