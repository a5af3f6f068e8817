import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { resolveConfig, SETTING_NAMES, type ThreadgateConfig } from '../../../infra/config.js';
import { PACKAGE_ROOT } from '../../../infra/package-root.js';

/**
 * docs/configuration.md and the construct's props (infra/props.ts) name every deploy-time
 * setting with the default resolveConfig gives it; a setting added, renamed or re-defaulted
 * without them fails here.
 */
const DOC = readFileSync(`${PACKAGE_ROOT}docs/configuration.md`, 'utf8');
const PROPS = readFileSync(`${PACKAGE_ROOT}infra/props.ts`, 'utf8');
const defaults = resolveConfig({});

/** The settings table's rows: setting name → its Default cell. */
function docRows(): Map<string, string> {
  const rows = new Map<string, string>();
  const table = DOC.slice(DOC.indexOf('| Setting | Default | Meaning |'));
  for (const line of table.split('\n').slice(2)) {
    if (!line.startsWith('| `')) break;
    const [name, value] = line.split(' | ');
    rows.set((name ?? '').replace(/^\| `([A-Za-z]+)`.*$/, '$1'), value ?? '');
  }
  return rows;
}

/** Settings whose default is one plain value (the rest are per type, derived or empty). */
const SCALARS = (Object.keys(defaults) as (keyof ThreadgateConfig)[]).filter((k) =>
  ['number', 'boolean', 'string'].includes(typeof defaults[k]),
);

describe('docs/configuration.md', () => {
  it('has a row for every setting, and no row for a setting that does not exist', () => {
    expect([...docRows().keys()].sort()).toEqual([...SETTING_NAMES, 'nag'].sort());
  });

  it.each(
    SCALARS.filter((k) => !['workerTimeoutSeconds', 'leaseSeconds', 'visibilityTimeoutSeconds'].includes(k)),
  )('gives %s the default resolveConfig gives it', (name) => {
    expect(docRows().get(name)).toContain(`\`${String(defaults[name])}\``);
  });

  it('derives the default visibility timeout from the worker timeout: AWS’s 6 ×', () => {
    expect(defaults.visibilityTimeoutSeconds).toBe(6 * defaults.workerTimeoutSeconds);
    expect(docRows().get('visibilityTimeoutSeconds')).toContain('6 × timeout');
    expect(PROPS).toContain('@default 6 × the worker timeout');
  });

  it('quotes the default worker timeout resolveConfig computes', () => {
    expect(docRows().get('workerTimeoutSeconds')).toBeDefined();
    expect(DOC).toContain(`${defaults.workerTimeoutSeconds} s at the defaults`);
  });
});

describe('Threadgate props', () => {
  it.each(SETTING_NAMES.filter((n) => n !== 'stackName'))('document %s', (name) => {
    expect(PROPS).toMatch(new RegExp(`readonly ${name}\\?:`));
  });

  it.each(
    SCALARS.filter(
      (k) => !['stackName', 'workerTimeoutSeconds', 'leaseSeconds', 'visibilityTimeoutSeconds'].includes(k),
    ),
  )('give %s the @default resolveConfig gives it', (name) => {
    const doc =
      PROPS.slice(0, PROPS.indexOf(`readonly ${name}?:`))
        .split('/**')
        .at(-1) ?? '';
    const value = typeof defaults[name] === 'string' ? `'${defaults[name]}'` : String(defaults[name]);
    expect(doc).toContain(`@default ${value}`);
  });

  it('quote the default worker timeout resolveConfig computes', () => {
    expect(PROPS).toContain(`(${defaults.workerTimeoutSeconds} s at the defaults)`);
  });
});
