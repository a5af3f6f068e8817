import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { ConfigError } from '../../../../functions/common/errors.js';
import { externalCaptchaai, isLoopbackHost, planThreadsOf } from '../../../../local/stack/captchaai.js';
import { type CaptchaStandin, startCaptchaStandin } from '../../../../local/standins/captchaai/standin.js';

const KEY = 'abcdefabcdefabcdefabcdefabcdef12';

describe('the CaptchaAI server of a local stack (--captchaai-url)', () => {
  it.each([
    ['localhost', true],
    ['LOCALHOST.', true],
    ['api.localhost', true],
    ['127.0.0.1', true],
    ['127.8.9.10', true],
    ['[::1]', true],
    ['::1', true],
    ['10.0.0.1', false],
    ['192.168.1.5', false],
    ['0.0.0.0', false],
    ['ocr.captchaai.com', false],
    ['localhost.example.com', false],
    ['8.8.8.8', false],
  ])('treats %s as loopback: %s', (host, loopback) => {
    expect(isLoopbackHost(host)).toBe(loopback);
  });

  it('accepts a loopback URL with the key from the environment and drops a trailing slash', () => {
    expect(externalCaptchaai('http://127.0.0.1:8089/', ` ${KEY}\n`)).toEqual({
      url: 'http://127.0.0.1:8089',
      apiKey: KEY,
      loopback: true,
    });
    expect(externalCaptchaai('http://[::1]:9000/api', KEY).url).toBe('http://[::1]:9000/api');
  });

  it.each([
    ['http://127.0.0.1:8089', undefined, {}, /CAPTCHAAI_API_KEY: not set/],
    ['http://127.0.0.1:8089', '  ', {}, /CAPTCHAAI_API_KEY/],
    ['127.0.0.1:8089', KEY, {}, /--captchaai-url.*(not a URL|http)/],
    ['ftp://127.0.0.1/', KEY, {}, /must be http:\/\/ or https:\/\//],
    ['http://user:pw@127.0.0.1:8089', KEY, {}, /credentials/],
    ['http://127.0.0.1:8089/?key=x', KEY, {}, /query or fragment/],
    ['https://ocr.captchaai.com', KEY, {}, /not a loopback address.*--allow-remote-captchaai/],
    ['http://10.1.2.3:8089', KEY, { allowRemote: false }, /not a loopback address/],
  ])('refuses %s (key %j, %j) with a clear error', (url, key, options, message) => {
    expect(() => externalCaptchaai(url, key, options)).toThrow(ConfigError);
    expect(() => externalCaptchaai(url, key, options)).toThrow(message);
  });

  it('accepts a remote host only when explicitly allowed, and says it is not loopback', () => {
    expect(externalCaptchaai('https://ocr.captchaai.com', KEY, { allowRemote: true })).toEqual({
      url: 'https://ocr.captchaai.com',
      apiKey: KEY,
      loopback: false,
    });
  });
});

describe('planThreadsOf: the plan of an external server, over real HTTP', () => {
  let standin: CaptchaStandin | undefined;
  afterEach(async () => {
    await standin?.close();
    standin = undefined;
  });

  it("reads the plan's threads from the server's threadsinfo with its key", async () => {
    standin = await startCaptchaStandin({ threads: 7, apiKey: KEY });
    expect(await planThreadsOf({ url: standin.url, apiKey: KEY, loopback: true })).toBe(7);
    expect(Object.values(standin.stats().requestsByKey)).toEqual([1]);
  });

  it("fails with the server's answer when the key is wrong", async () => {
    standin = await startCaptchaStandin({ threads: 7, apiKey: KEY });
    await expect(planThreadsOf({ url: standin.url, apiKey: 'f'.repeat(32), loopback: true })).rejects.toThrow(
      /ERROR_KEY_DOES_NOT_EXIST/,
    );
  });

  it('fails when the server does not speak the CaptchaAI API', async () => {
    const server = createServer((_req, res) => res.writeHead(404).end('not here'));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    try {
      const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
      await expect(planThreadsOf({ url, apiKey: KEY, loopback: true })).rejects.toThrow();
    } finally {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    }
  });
});
