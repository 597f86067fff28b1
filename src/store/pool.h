// The Store's connections (sql.h): each call borrows one and gives it back.
// A call waits while all are lent; with one connection (SQLite) that wait is
// the Store's old mutex, so every call is serialised exactly as before.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "store/sql.h"

namespace kiln::store {

class ConnPool final {
 public:
  explicit ConnPool(std::vector<std::unique_ptr<Conn>> conns) : idle_(std::move(conns)) {}
  ConnPool(const ConnPool&) = delete;
  ConnPool& operator=(const ConnPool&) = delete;

  class Lease final {
   public:
    Lease(ConnPool* pool, std::unique_ptr<Conn> conn) : pool_(pool), conn_(std::move(conn)) {}
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ~Lease() { pool_->Return(std::move(conn_)); }
    Conn* operator->() const { return conn_.get(); }
    Conn& operator*() const { return *conn_; }

   private:
    ConnPool* pool_;
    std::unique_ptr<Conn> conn_;
  };

  Lease Acquire() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [this] { return !idle_.empty(); });
    std::unique_ptr<Conn> c = std::move(idle_.back());
    idle_.pop_back();
    return Lease(this, std::move(c));
  }

 private:
  void Return(std::unique_ptr<Conn> c) {
    {
      std::lock_guard lock(mu_);
      idle_.push_back(std::move(c));
    }
    cv_.notify_one();
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<Conn>> idle_;  // guarded by mu_
};

}  // namespace kiln::store
