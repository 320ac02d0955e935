// Preloaded into the reference servers the tests run (`node --require`):
// a server that listens on a bare port listens on 127.0.0.1 only.
const net = require('net');
const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  if (typeof args[0] === 'number' || (typeof args[0] === 'string' && /^\d+$/.test(args[0]))) {
    const cb = args.find((a) => typeof a === 'function');
    return listen.call(this, Number(args[0]), '127.0.0.1', cb);
  }
  return listen.apply(this, args);
};
