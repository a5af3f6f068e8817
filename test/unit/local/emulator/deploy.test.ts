import { describe, expect, it } from 'vitest';
import { assemblyKey } from '../../../../local/emulator/deploy.js';

describe('local deploy', () => {
  it('reuses one synthesized assembly for every CaptchaAI URL but not for other settings', () => {
    // Prepare
    const base = {
      stackName: 'Threadgate',
      timeScale: 0.02,
      reserve: 2,
      allowedHosts: ['127.0.0.1', 'localhost'],
    };
    // Act
    const first = assemblyKey({ ...base, captchaaiUrl: 'http://127.0.0.1:40001' });
    const second = assemblyKey({ ...base, captchaaiUrl: 'http://127.0.0.1:40002' });
    const otherReserve = assemblyKey({ ...base, reserve: 3, captchaaiUrl: 'http://127.0.0.1:40001' });
    const otherHosts = assemblyKey({
      ...base,
      allowedHosts: ['127.0.0.1'],
      captchaaiUrl: 'http://127.0.0.1:40001',
    });
    // Assess
    expect(second).toBe(first);
    expect(otherReserve).not.toBe(first);
    expect(otherHosts).not.toBe(first);
  });
});
