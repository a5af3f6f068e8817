/**
 * Socket error codes that are raised before a request's first byte is written: connect refused
 * or unreachable, DNS, TLS handshake and certificate failures, undici's connect timeout. A reset
 * (ECONNRESET, UND_ERR_SOCKET) or a timeout can come after the request was sent, so they are not
 * among them: such a request may have taken effect although its answer was lost.
 */
const NOT_SENT_CODES = new Set([
  'ECONNREFUSED',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EAI_FAIL',
  'ENETUNREACH',
  'EHOSTUNREACH',
  'EADDRNOTAVAIL',
  'UND_ERR_CONNECT_TIMEOUT',
  'CERT_HAS_EXPIRED',
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'SELF_SIGNED_CERT_IN_CHAIN',
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
]);

/** Whether a network error's code proves the request was never sent (see NOT_SENT_CODES). */
export function failedBeforeSending(code: string | undefined): boolean {
  if (code === undefined) return false;
  return NOT_SENT_CODES.has(code) || code.startsWith('ERR_TLS_') || code.startsWith('ERR_SSL_');
}

/** An error and the causes it wraps, at most `depth` in all (fetch failures nest two or three deep). */
export function* causeChain(err: unknown, depth = 4): Generator<unknown> {
  let cause: unknown = err;
  for (let i = 0; cause && i < depth; i++) {
    yield cause;
    cause = (cause as { cause?: unknown }).cause;
  }
}

/** The socket error code of a fetch failure (undici nests it one or two causes deep). */
export function socketErrorCode(err: unknown): string | undefined {
  for (const cause of causeChain(err)) {
    const code = (cause as { code?: unknown }).code;
    if (typeof code === 'string' && cause !== err) return code;
  }
  return undefined;
}
