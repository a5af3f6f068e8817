import { connect, type Socket } from 'node:net';
import { CreateBucketCommand, PutObjectCommand, S3Client } from '@aws-sdk/client-s3';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { clientConfig } from '../../../../local/emulator/deploy.js';
import { awsEnvFor, type MotoServer } from '../../../../local/emulator/moto.js';
import { clientsFor, createOutcomeTable, startMoto } from '../../../fixtures/aws.js';

/**
 * The moto launcher's HTTP/1.1 keep-alive (local/emulator/moto_server.py `_KeepAliveHandler`),
 * over a raw TCP connection: one connection carries request after request, a chunked body is
 * read whole before the next request, a HEAD answer keeps the object's length and sends no body,
 * and a client's `Connection: close` closes it.
 */
let moto: MotoServer;
let socket: Socket | undefined;
const TABLE = 'keep-alive';

beforeAll(async () => {
  moto = await startMoto();
  await createOutcomeTable(clientsFor(moto).ddb, TABLE);
  // Path-style, so the bucket is a path on the emulator's address.
  const s3 = new S3Client({ ...clientConfig(awsEnvFor(moto.endpoint)), forcePathStyle: true });
  await s3.send(new CreateBucketCommand({ Bucket: 'keep-alive' }));
  await s3.send(new PutObjectCommand({ Bucket: 'keep-alive', Key: 'three', Body: 'abc' }));
});
afterAll(async () => {
  await moto?.stop();
});
afterEach(() => {
  socket?.destroy();
  socket = undefined;
});

interface Answer {
  status: number;
  headers: Record<string, string>;
  body: string;
}

/** Reads HTTP answers off one connection, in order. */
class Connection {
  private buffer = Buffer.alloc(0);
  private waiting: (() => void) | undefined;
  ended = false;

  constructor(readonly socket: Socket) {
    socket.on('data', (chunk: Buffer) => {
      this.buffer = Buffer.concat([this.buffer, chunk]);
      this.waiting?.();
    });
    socket.on('end', () => {
      this.ended = true;
      this.waiting?.();
    });
  }

  send(raw: string): void {
    this.socket.write(raw);
  }

  /** The next answer; a HEAD answer has no body whatever its Content-Length says. */
  async answer(head = false): Promise<Answer> {
    for (;;) {
      const end = this.buffer.indexOf('\r\n\r\n');
      if (end >= 0) {
        const [statusLine, ...lines] = this.buffer.subarray(0, end).toString('latin1').split('\r\n');
        const headers: Record<string, string> = {};
        for (const line of lines) {
          const colon = line.indexOf(':');
          headers[line.slice(0, colon).toLowerCase()] = line.slice(colon + 1).trim();
        }
        const length = head ? 0 : Number(headers['content-length'] ?? 0);
        if (this.buffer.length >= end + 4 + length) {
          const body = this.buffer.subarray(end + 4, end + 4 + length).toString('utf8');
          this.buffer = this.buffer.subarray(end + 4 + length);
          return { status: Number(statusLine?.split(' ')[1]), headers, body };
        }
      }
      if (this.ended) throw new Error(`connection ended with ${this.buffer.length} bytes unread`);
      await new Promise<void>((resolve) => {
        this.waiting = resolve;
      });
    }
  }
}

async function open(): Promise<Connection> {
  const url = new URL(moto.endpoint);
  socket = connect(Number(url.port), url.hostname);
  await new Promise<void>((resolve, reject) => {
    socket?.once('connect', resolve).once('error', reject);
  });
  return new Connection(socket);
}

/** A DynamoDB JSON call as raw HTTP: `body` as one piece, or chunked in the pieces given. */
function dynamo(host: string, operation: string, body: object, chunks?: number, close = false): string {
  const json = JSON.stringify(body);
  const head = [
    'POST / HTTP/1.1',
    `Host: ${host}`,
    `X-Amz-Target: DynamoDB_20120810.${operation}`,
    'Content-Type: application/x-amz-json-1.0',
    'Authorization: AWS4-HMAC-SHA256 Credential=testing/20260101/us-east-1/dynamodb/aws4_request, SignedHeaders=host, Signature=0',
    ...(close ? ['Connection: close'] : []),
  ];
  if (!chunks)
    return `${[...head, `Content-Length: ${Buffer.byteLength(json)}`].join('\r\n')}\r\n\r\n${json}`;
  const size = Math.ceil(json.length / chunks);
  let out = `${[...head, 'Transfer-Encoding: chunked'].join('\r\n')}\r\n\r\n`;
  for (let at = 0; at < json.length; at += size) {
    const piece = json.slice(at, at + size);
    out += `${Buffer.byteLength(piece).toString(16)}\r\n${piece}\r\n`;
  }
  return `${out}0\r\n\r\n`;
}

describe('the moto launcher keeps connections open', () => {
  it('answers request after request on one connection, a chunked body among them', async () => {
    // Prepare
    const connection = await open();
    const host = new URL(moto.endpoint).host;
    // Act: a chunked write, then a plain read of it, then one more call, without reconnecting.
    connection.send(
      dynamo(
        host,
        'PutItem',
        { TableName: TABLE, Item: { record_key: { S: 'k' }, status: { S: 'submitted' } } },
        3,
      ),
    );
    const put = await connection.answer();
    connection.send(dynamo(host, 'GetItem', { TableName: TABLE, Key: { record_key: { S: 'k' } } }));
    const get = await connection.answer();
    connection.send(dynamo(host, 'ListTables', {}));
    const list = await connection.answer();
    // Assess
    expect([put.status, get.status, list.status]).toEqual([200, 200, 200]);
    expect(JSON.parse(get.body).Item).toEqual({ record_key: { S: 'k' }, status: { S: 'submitted' } });
    expect(JSON.parse(list.body).TableNames).toContain(TABLE);
    for (const answer of [put, get, list]) expect(answer.headers.connection).toBeUndefined();
    expect(connection.ended).toBe(false);
  });

  it('answers HEAD with the object length and no body, and the connection goes on', async () => {
    // Prepare
    const connection = await open();
    const host = new URL(moto.endpoint).host;
    const auth =
      'Authorization: AWS4-HMAC-SHA256 Credential=testing/20260101/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=0';
    // Act
    connection.send(`HEAD /keep-alive/three HTTP/1.1\r\nHost: ${host}\r\n${auth}\r\n\r\n`);
    const head = await connection.answer(true);
    connection.send(`GET /keep-alive/three HTTP/1.1\r\nHost: ${host}\r\n${auth}\r\n\r\n`);
    const get = await connection.answer();
    // Assess
    expect(head.status).toBe(200);
    expect(head.headers['content-length']).toBe('3');
    expect(get).toMatchObject({ status: 200, body: 'abc' });
  });

  it("closes the connection after answering a client's Connection: close", async () => {
    // Prepare
    const connection = await open();
    const host = new URL(moto.endpoint).host;
    // Act
    connection.send(dynamo(host, 'ListTables', {}, undefined, true));
    const list = await connection.answer();
    await new Promise((resolve) => connection.socket.once('close', resolve));
    // Assess
    expect(list.status).toBe(200);
    expect(list.headers.connection).toBe('close');
    expect(connection.ended).toBe(true);
  });
});
