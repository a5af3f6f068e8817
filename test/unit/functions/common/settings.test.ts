import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { DEFAULTS } from '../../../../functions/common/settings.js';
import { readCapSettings } from '../../../../functions/pipeline/cap.js';
import { resolveConfig } from '../../../../infra/config.js';

const ROOT = new URL('../../../..', import.meta.url).pathname;
const SOURCE_DIRS = ['functions', 'infra', 'cli', 'local', 'bench', 'bin'];

/** Source lines that are code, not comments (a default named in a doc comment is documentation). */
function codeLines(): { file: string; line: string }[] {
  const out: { file: string; line: string }[] = [];
  for (const dir of SOURCE_DIRS) {
    for (const file of readdirSync(join(ROOT, dir), { recursive: true, encoding: 'utf8' })) {
      if (!/\.(ts|mjs|js)$/.test(file)) continue;
      for (const line of readFileSync(join(ROOT, dir, file), 'utf8').split('\n')) {
        const trimmed = line.trim();
        if (trimmed.startsWith('*') || trimmed.startsWith('/*') || trimmed.startsWith('//')) continue;
        out.push({ file: `${dir}/${file}`, line: trimmed });
      }
    }
  }
  return out;
}

describe('settings', () => {
  it.each([
    ['the CaptchaAI URL', `'${DEFAULTS.captchaaiUrl}'`],
    ['the secret name', `'${DEFAULTS.secretName}'`],
    ['the stack name', `'${DEFAULTS.stackName}'`],
  ])('writes %s once in the source, in functions/common/settings.ts', (_name, literal) => {
    const files = new Set(
      codeLines()
        .filter((l) => l.line.includes(literal))
        .map((l) => l.file),
    );
    expect([...files]).toEqual(['functions/common/settings.ts']);
  });

  it('gives the deploy-time settings and the adjuster the same cap defaults', () => {
    const deployed = resolveConfig({});
    expect(readCapSettings({})).toEqual({
      reserve: deployed.reserve,
      minCap: deployed.minCap,
      maxCap: deployed.maxCap,
    });
  });

  it.each([
    [1, 1000],
    [16, 16_000],
  ])(
    'defaults maxCap to 1000 × lanes at deploy time and in the adjuster alike (lanes %i)',
    (lanes, maxCap) => {
      // Act
      const deployed = resolveConfig({ lanes });
      const adjuster = readCapSettings({ LANES: String(lanes) });
      // Assess
      expect(deployed.maxCap).toBe(maxCap);
      expect(adjuster.maxCap).toBe(maxCap);
    },
  );

  it('lets the adjuster take a MAX_CAP up to 1000 × LANES and refuses one above, naming the variable', () => {
    expect(readCapSettings({ LANES: '16', MAX_CAP: '16000' }).maxCap).toBe(16_000);
    expect(() => readCapSettings({ LANES: '16', MAX_CAP: '16001' })).toThrow(/^MAX_CAP: .*16000/);
    expect(() => readCapSettings({ MAX_CAP: '1001' })).toThrow(/^MAX_CAP: .*1000/);
  });
});
