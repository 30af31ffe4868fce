// fenced-outbox's encryption at rest for producers over the SQL API (docs/security.md,
// "Encryption at rest"), with Node's own crypto.
//
// With a key configured, a producer stores an op's body, and each header value, sealed: the
// dispatcher opens them right before sending, with the key the envelope names. The envelope,
// the same in every language:
//
//   'OBX1' | key id length (1 byte) | key id | nonce (12 bytes) | AES-256-GCM ciphertext and tag
//
// A header value is stored as 'obx1:' and the envelope in base64 (no padding). The associated
// data binds the ciphertext to its place: 'outbox/v1\0' + field + '\0' + destination, the field
// being 'body' or 'header:' and the header name in lower case. The nonce is the first 12 bytes
// of HMAC-SHA-256(HMAC-SHA-256(key, 'outbox/v1 nonce'), associated data + '\0' + plaintext):
// the same request sealed twice is the same envelope, so outbox.enqueue, which hashes what it is
// given, still finds a rerun to be a duplicate (under the same key).
//
// Keys are 32 random bytes in base64, in a file or an environment variable
// (head -c 32 /dev/urandom | base64), named by an id of 1-64 of [A-Za-z0-9._-]; the
// dispatcher's [encryption] keys must hold the same id and key.

'use strict';

const crypto = require('node:crypto');
const fs = require('node:fs');

const MAGIC = Buffer.from('OBX1');
const HEADER_PREFIX = 'obx1:';
const KEY_ID = /^[A-Za-z0-9._-]{1,64}$/;

function associatedData(field, destination) {
  return Buffer.concat([
    Buffer.from('outbox/v1\0'),
    Buffer.from(field),
    Buffer.from('\0'),
    Buffer.from(destination),
  ]);
}

/** One key: its id and its 32 bytes. Never printed. */
class Key {
  #secret;
  #nonceKey;

  constructor(id, secret) {
    if (!KEY_ID.test(id)) {
      throw new Error(`key id ${JSON.stringify(id)}: use 1 to 64 of A-Z, a-z, 0-9, '.', '_' and '-'`);
    }
    if (secret.length !== 32) throw new Error(`key ${id}: decodes to ${secret.length} bytes; a key is 32`);
    this.id = id;
    this.#secret = Buffer.from(secret);
    this.#nonceKey = crypto.createHmac('sha256', this.#secret).update('outbox/v1 nonce').digest();
  }

  /** A key from 'ID=file:/path' or 'ID=env:NAME' (its base64 text, whitespace ignored). */
  static load(spec) {
    const at = spec.indexOf('=');
    const id = spec.slice(0, at).trim();
    const source = spec.slice(at + 1).trim();
    let text;
    if (at > 0 && source.startsWith('file:')) {
      text = fs.readFileSync(source.slice('file:'.length), 'ascii');
    } else if (at > 0 && source.startsWith('env:')) {
      text = process.env[source.slice('env:'.length)];
      if (text === undefined) throw new Error(`key ${id}: the environment variable ${source.slice(4)} is not set`);
    } else {
      throw new Error(`key ${id}: expected ID=file:/path or ID=env:NAME`);
    }
    return new Key(id, Buffer.from(text.trim(), 'base64'));
  }

  /** The body as stored: sealed, or empty when empty (nothing to hide). */
  sealBody(destination, body) {
    return body.length ? this.#seal(associatedData('body', destination), body) : Buffer.alloc(0);
  }

  /** A header value as stored: 'obx1:' and its envelope in base64, or empty when empty. */
  sealHeader(destination, name, value) {
    if (!value) return '';
    const envelope = this.#seal(associatedData(`header:${name.toLowerCase()}`, destination), Buffer.from(value));
    return HEADER_PREFIX + envelope.toString('base64').replace(/=+$/, '');
  }

  #seal(aad, plaintext) {
    const nonce = crypto
      .createHmac('sha256', this.#nonceKey)
      .update(Buffer.concat([aad, Buffer.from('\0'), plaintext]))
      .digest()
      .subarray(0, 12);
    const cipher = crypto.createCipheriv('aes-256-gcm', this.#secret, nonce);
    cipher.setAAD(aad);
    const sealed = Buffer.concat([cipher.update(plaintext), cipher.final(), cipher.getAuthTag()]);
    const id = Buffer.from(this.id);
    return Buffer.concat([MAGIC, Buffer.from([id.length]), id, nonce, sealed]);
  }

  toJSON() {
    return { id: this.id };
  }
}

module.exports = { Key, MAGIC, HEADER_PREFIX };
