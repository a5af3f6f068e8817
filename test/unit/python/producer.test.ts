import { execFileSync, spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { STATE_ITEM_ATTRIBUTE, STATE_ITEM_KEY } from '../../../functions/pipeline/state-item.js';
import { validateJobMessage } from '../../../functions/records/job-schema.js';
import { PYTHON_SCHEMA_PATH, renderJobSchema } from '../../../functions/records/write-job-schema.js';
import { PACKAGE_ROOT, VERSION } from '../../../infra/package-root.js';
import { stackDescription } from '../../../infra/threadgate-stack.js';
import { malformedJobs } from '../../fixtures/job-catalog.js';

/**
 * The Python producer package (python/) kept in step with the repository: its unit tests pass,
 * it ships the job schema the zod source renders, its version is the npm package's, its
 * license is the repository's, and its validator never refuses a record the worker accepts.
 */
const PYTHON_DIR = `${PACKAGE_ROOT}python`;

function python(code: string, input = ''): string {
  return execFileSync('python3', ['-c', code], { cwd: PYTHON_DIR, input, encoding: 'utf8' });
}

describe('threadgate_producer (python/)', () => {
  it('passes its own unit tests', () => {
    const run = spawnSync('python3', ['-m', 'unittest', 'discover', '-s', 'tests'], {
      cwd: PYTHON_DIR,
      encoding: 'utf8',
    });
    expect(run.stderr).toMatch(/\nOK\n?$/);
    expect(run.status).toBe(0);
  });

  it('ships the job schema exactly as `npm run schema` renders it', () => {
    expect(readFileSync(PYTHON_SCHEMA_PATH, 'utf8')).toBe(renderJobSchema());
  });

  it('has the npm package version, which the stack description names too', () => {
    const version = python('import threadgate_producer as tg; print(tg.__version__, end="")');
    expect(version).toBe(VERSION);
    expect(readFileSync(`${PACKAGE_ROOT}package.json`, 'utf8')).toContain(`"version": "${version}"`);
    expect(stackDescription()).toContain(`threadgate ${version}:`);
  });

  it('carries the repository LICENSE, which both packages name', () => {
    expect(readFileSync(`${PYTHON_DIR}/LICENSE`, 'utf8')).toBe(
      readFileSync(`${PACKAGE_ROOT}LICENSE`, 'utf8'),
    );
    expect(readFileSync(`${PYTHON_DIR}/pyproject.toml`, 'utf8')).toContain('license = { text = "MIT" }');
    expect(JSON.parse(readFileSync(`${PACKAGE_ROOT}package.json`, 'utf8')).license).toBe('MIT');
  });

  it('has every function and result field the docs and the Ray recipe use', () => {
    const docs = ['python/README.md', 'docs/producers.md', 'docs/recipes/ray_send_and_wait.py', 'README.md']
      .map((f) => readFileSync(`${PACKAGE_ROOT}${f}`, 'utf8'))
      .join('\n');
    const functions = [...new Set([...docs.matchAll(/\btg\.(\w+)/g)].map((m) => m[1] as string))];
    const fields = [
      ...new Set([...docs.matchAll(/\b(?:sent|result|done|s)\.(\w+)/g)].map((m) => m[1] as string)),
    ];
    const missing = python(
      'import json, sys, dataclasses, threadgate_producer as tg\n' +
        'names, fields = json.loads(sys.stdin.read())\n' +
        'known = {f.name for c in (tg.SendResult, tg.WaitResult) for f in dataclasses.fields(c)}\n' +
        'print(json.dumps([n for n in names if not hasattr(tg, n)] + [f for f in fields if f not in known]))',
      JSON.stringify([functions, fields]),
    );
    expect(functions.length).toBeGreaterThan(4);
    expect(JSON.parse(missing)).toEqual([]);
  });

  it('reads the state item the worker and the CLI write: the same key and attribute', () => {
    const key = python(
      'import json, threadgate_producer.outcomes as o\nprint(json.dumps(o.STATE_ITEM_KEY), end="")',
    );
    expect(JSON.parse(key)).toEqual(STATE_ITEM_KEY);
    expect(STATE_ITEM_ATTRIBUTE.state).toBe('state');
  });

  it('refuses only records the worker refuses too, over the whole bad-input catalog', () => {
    const cases = malformedJobs('https://forms.example.com', 'sitekey_1', 'cat');
    const objects = cases.filter((c) => {
      try {
        const v = JSON.parse(c.body);
        return typeof v === 'object' && v !== null && !Array.isArray(v);
      } catch {
        return false;
      }
    });
    const good = JSON.stringify({
      record_key: 'ok-1',
      sitekey: 'abc',
      pageurl: 'https://forms.example.com/a',
      submit_url: 'https://forms.example.com/s',
    });
    const bodies = [...objects.map((c) => c.body), good];
    const out = python(
      'import json, sys, threadgate_producer as tg\n' +
        'for line in sys.stdin: print(json.dumps(tg.validate(json.loads(line))))',
      `${bodies.join('\n')}\n`,
    );
    const verdicts = out
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as string[]);
    let refusedByBoth = 0;
    bodies.forEach((body, i) => {
      const worker = validateJobMessage(body);
      if ((verdicts[i] ?? []).length > 0) {
        expect(worker.ok, `python refused ${body}: ${verdicts[i]}`).toBe(false);
        refusedByBoth += 1;
      }
    });
    expect(verdicts.at(-1)).toEqual([]);
    expect(validateJobMessage(good).ok).toBe(true);
    // Most of the catalog is the schema's business; the rest are the worker's cross-field and network rules.
    expect(refusedByBoth).toBeGreaterThan(objects.length / 2);
  });
});
