// Beats' Event API for `script` processors, over the event's fields as a
// plain object. Evaluated before the user's script; everything it needs is
// captured here, so a script that replaces JSON, Object or Array cannot
// break the Event API.
(function (global) {
  "use strict";
  var parse = JSON.parse;
  var isArray = Array.isArray;
  var hasOwn = Object.prototype.hasOwnProperty;
  var defineProperty = Object.defineProperty;
  var freeze = Object.freeze;

  function isMap(v) {
    return v !== null && typeof v === "object" && !isArray(v);
  }
  function typeName(v) {
    if (v === null) return "null";
    if (isArray(v)) return "array";
    return typeof v;
  }
  // A plain write: a key such as `__proto__` becomes a field, not a
  // prototype.
  function set(obj, key, value) {
    if (key === "__proto__") {
      defineProperty(obj, key, { value: value, writable: true, enumerable: true, configurable: true });
    } else {
      obj[key] = value;
    }
  }

  // Walks `key` as Beats' mapstr does: at each level the whole remaining key
  // is tried as a literal key first, then the key is split at its first dot.
  // Returns [object, key, present], or null when the way is missing or
  // blocked and `create` is false.
  function find(data, key, create) {
    for (;;) {
      if (hasOwn.call(data, key)) return [data, key, true];
      var dot = key.indexOf(".");
      if (dot < 0) return [data, key, false];
      var head = key.slice(0, dot);
      if (!hasOwn.call(data, head)) {
        if (!create) return null;
        set(data, head, {});
      }
      var next = data[head];
      if (!isMap(next)) {
        if (create) throw new TypeError("expected map but type is " + typeName(next) + " at `" + head + "`");
        return null;
      }
      data = next;
      key = key.slice(dot + 1);
    }
  }

  function get(fields, key) {
    key = String(key);
    // The common case first: a top-level key.
    if (hasOwn.call(fields, key)) {
      var top = fields[key];
      return top === undefined ? null : top;
    }
    var at = find(fields, key, false);
    if (at === null || !at[2]) return null;
    var v = at[0][at[1]];
    return v === undefined ? null : v;
  }

  function put(fields, key, value) {
    var at = find(fields, String(key), true);
    var old = at[2] ? at[0][at[1]] : null;
    set(at[0], at[1], value);
    return old === undefined ? null : old;
  }

  function remove(fields, key) {
    var at = find(fields, String(key), false);
    if (at === null || !at[2]) return false;
    delete at[0][at[1]];
    return true;
  }

  // Beats' appendString: absent becomes the value (or [value]), a different
  // string becomes [old, value], a list gains the value unless it holds it.
  function appendString(fields, field, value, alwaysArray) {
    var at = find(fields, field, false);
    var cur = at !== null && at[2] ? at[0][at[1]] : null;
    if (cur === null || cur === undefined) {
      put(fields, field, alwaysArray ? [value] : value);
    } else if (typeof cur === "string") {
      if (cur !== value) put(fields, field, [cur, value]);
    } else if (isArray(cur)) {
      for (var i = 0; i < cur.length; i++) {
        if (cur[i] === value) return;
      }
      cur.push(value);
    } else {
      throw new TypeError("unexpected type " + typeName(cur) + " found for " + field + " field");
    }
  }

  // Beats refuses a call missing an argument; `undefined` stands for a
  // missing one (reading `arguments` would cost every call an object).
  function need(value, what) {
    if (value === undefined) throw new Error(what);
  }

  function Event(fields) {
    if (!(this instanceof Event)) throw new TypeError("Event must be called with new");
    need(fields, "Event constructor requires one argument");
    if (!isMap(fields)) throw new TypeError("Event constructor requires an object argument but got " + typeName(fields));
    // The methods work on the fields given here even when a script
    // reassigns `event.fields`, as Beats' do.
    this._fields = fields;
    this.fields = fields;
    this._cancelled = false;
  }
  Event.prototype.Get = function (key) {
    if (key === undefined) return this._fields;
    return get(this._fields, key);
  };
  Event.prototype.Put = function (key, value) {
    need(value, "Put requires two arguments (key and value)");
    return put(this._fields, key, value);
  };
  Event.prototype.Rename = function (from, to) {
    need(to, "Rename requires two arguments (from and to)");
    from = String(from);
    to = String(to);
    var target = find(this._fields, to, false);
    if (target !== null && target[2]) return false;
    var source = find(this._fields, from, false);
    if (source === null || !source[2]) return false;
    var value = source[0][source[1]];
    delete source[0][source[1]];
    try {
      put(this._fields, to, value);
    } catch (e) {
      put(this._fields, from, value);
      return false;
    }
    return true;
  };
  Event.prototype.Delete = function (key) {
    need(key, "Delete requires one argument");
    return remove(this._fields, key);
  };
  Event.prototype.Cancel = function () {
    this._cancelled = true;
  };
  Event.prototype.Tag = function (tag) {
    need(tag, "Tag requires one argument");
    appendString(this._fields, "tags", String(tag), true);
  };
  Event.prototype.AppendTo = function (field, value) {
    need(value, "AppendTo requires two arguments (field and value)");
    appendString(this._fields, String(field), String(value), false);
  };
  freeze(Event.prototype);

  // `require` of Beats' modules: `console` is accepted (its output is not
  // kept); the others are not available here.
  var quiet = function () {};
  var consoleModule = freeze({ log: quiet, debug: quiet, info: quiet, warn: quiet, error: quiet });
  function require(name) {
    if (name === "console") return consoleModule;
    throw new Error("module `" + name + "` is not available in leasehold's script processor (only `console` is)");
  }

  var processFn = null;
  var current = null;

  // Called once the user's script has loaded.
  function bind() {
    if (typeof global.process !== "function") {
      throw new Error(global.process === undefined ? "process function not found" : "process is not a function");
    }
    processFn = global.process;
  }
  function register(paramsText) {
    if (typeof global.register !== "function") {
      throw new Error("params were provided but no register function was found");
    }
    global.register(parse(paramsText));
  }
  function test() {
    if (global.test === undefined) return;
    if (typeof global.test !== "function") throw new Error("test is not a function");
    global.test();
  }
  // One event's fields in, the same object out (null when cancelled).
  function run(fields) {
    current = new Event(fields);
    processFn(current);
    return current._cancelled ? null : current._fields;
  }
  // The fields as the failed call left them.
  function leftover() {
    return current === null ? null : current._fields;
  }

  var own = { Event: Event, require: require };
  for (var name in own) {
    defineProperty(global, name, { value: own[name], writable: false, enumerable: false, configurable: false });
  }
  defineProperty(global, "__leasehold", {
    value: freeze({ bind: bind, register: register, test: test, run: run, leftover: leftover }),
    writable: false, enumerable: false, configurable: false
  });
})(globalThis);
