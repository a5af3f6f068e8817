import { existsSync, mkdtempSync, readdirSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { extractZip, writeZip, ZipFormatError } from '../../../../local/emulator/zip.js';

/** The local runtime unpacks Lambda code with extractZip; nothing may land outside its folder. */
function folders() {
  const parent = mkdtempSync(join(tmpdir(), 'threadgate-zip-'));
  const staging = join(parent, 'code.1234');
  return { parent, staging };
}

const file = (name: string, mode?: number) => ({ name, data: Buffer.from(`content of ${name}`), mode });

describe('extractZip', () => {
  it('unpacks plain files, nested folders included', () => {
    const { staging } = folders();
    const written = extractZip(writeZip([file('index.js'), file('lib/a/b.js')]), staging);
    expect(written.map((p) => p.slice(staging.length + 1)).sort()).toEqual(['index.js', 'lib/a/b.js']);
    expect(readFileSync(join(staging, 'lib/a/b.js'), 'utf8')).toBe('content of lib/a/b.js');
  });

  it.each([
    ['a sibling of the folder with a shared prefix', (s: string) => `../${basename(s)}x/evil.js`],
    ['a parent path', () => '../evil.js'],
    ['a .. in the middle', () => 'lib/../../evil.js'],
    ['an absolute path', () => '/tmp/threadgate-zip-evil.js'],
    ['a Windows drive path', () => 'C:/evil.js'],
    ['a backslash path', () => '..\\evil.js'],
  ])('refuses %s and writes nothing', (_what, nameFor) => {
    // Prepare
    const { parent, staging } = folders();
    const zip = writeZip([file('index.js'), file(nameFor(staging))]);
    // Act + Assess
    expect(() => extractZip(zip, staging)).toThrow(ZipFormatError);
    expect(() => extractZip(zip, staging)).toThrow(/refused/);
    expect(readdirSync(parent)).toEqual([]);
    expect(existsSync('/tmp/threadgate-zip-evil.js')).toBe(false);
  });

  it('refuses a symbolic-link entry', () => {
    const { parent, staging } = folders();
    const link = { name: 'lib', data: Buffer.from('/etc'), mode: 0o120777 };
    expect(() => extractZip(writeZip([link, file('lib/passwd')]), staging)).toThrow(/symbolic link/);
    expect(readdirSync(parent)).toEqual([]);
  });
});
