import { afterEach, describe, expect, it, vi } from 'vitest';

// Records which heavy modules the CLI imports: each factory runs only if the module is loaded.
const loaded = vi.hoisted(() => new Set<string>());
vi.mock('../../../local/stack/local-stack.js', async (importOriginal) => {
  loaded.add('local-stack');
  return importOriginal();
});
vi.mock('../../../bench/run.js', async (importOriginal) => {
  loaded.add('bench');
  return importOriginal();
});

const { main } = await import('../../../cli/main.js');

/** Runs the CLI in-process with its output captured; returns stdout. */
async function run(...args: string[]): Promise<string> {
  let out = '';
  const write = vi.spyOn(process.stdout, 'write').mockImplementation((chunk) => {
    out += String(chunk);
    return true;
  });
  try {
    await main(['node', 'threadgate', ...args]);
  } finally {
    write.mockRestore();
  }
  return out;
}

afterEach(() => {
  process.exitCode = undefined;
});

describe('commands are loaded lazily', () => {
  it('shows `status --help` without importing the local stack or the benchmark', async () => {
    // Act
    const help = await run('--profile', 'someone', 'status', '--help');

    // Assess
    expect(help).toContain('Usage: threadgate status');
    expect(process.exitCode).toBe(0);
    expect([...loaded]).toEqual([]);
  });

  it('loads every command for the overall help', async () => {
    // Act
    const help = await run('--help');

    // Assess
    for (const name of ['status', 'enqueue', 'outcomes', 'local', 'bench', 'solve']) {
      expect(help).toMatch(new RegExp(`^  ${name}\\b`, 'm'));
    }
    expect([...loaded].sort()).toEqual(['bench', 'local-stack']);
  });
});
