// CUDA user objects (user_objects.h) and their runtime/driver entry points.
#include "interposer/client/user_objects.h"

#include <cuda.h>

#include <atomic>
#include <mutex>
#include <set>
#include <thread>

#include "interposer/client/client_internal.h"
#include "interposer/client/driver_internal.h"

// The handle the app holds (cudaUserObject_t == CUuserObject).
struct CUuserObject_st {
  void* ptr = nullptr;
  cudaHostFn_t destroy = nullptr;
  std::atomic<long long> refs{0};
};

namespace phos::client {

namespace {

std::mutex g_user_objects_mu;
std::set<const CUuserObject_st*>& Live() {  // guarded by g_user_objects_mu
  static auto* live = new std::set<const CUuserObject_st*>();
  return *live;
}

cudaError_t Create(CUuserObject_st** out, void* ptr, cudaHostFn_t destroy, unsigned initial, unsigned flags) {
  if (cudaError_t e = Initialised(); e != cudaSuccess) return SetError(e);
  // CUDA requires cudaUserObjectNoDestructorSync (the only flag there is).
  if (out == nullptr || destroy == nullptr || initial == 0 || flags != cudaUserObjectNoDestructorSync) {
    return SetError(cudaErrorInvalidValue);
  }
  auto* obj = new CUuserObject_st;
  obj->ptr = ptr;
  obj->destroy = destroy;
  obj->refs = initial;
  std::lock_guard<std::mutex> lock(g_user_objects_mu);
  Live().insert(obj);
  *out = obj;
  return cudaSuccess;
}

cudaError_t RetainChecked(CUuserObject_st* obj, unsigned count) {
  if (count == 0 || !IsLiveUserObject(obj)) return SetError(cudaErrorInvalidValue);
  RetainUserObject(obj, count);
  return cudaSuccess;
}

cudaError_t ReleaseChecked(CUuserObject_st* obj, unsigned count) {
  if (count == 0 || !IsLiveUserObject(obj)) return SetError(cudaErrorInvalidValue);
  // More than it has would destroy it under another holder's feet.
  if (obj->refs.load() < static_cast<long long>(count)) return SetError(cudaErrorInvalidValue);
  ReleaseUserObject(obj, count);
  return cudaSuccess;
}

}  // namespace

bool IsLiveUserObject(const CUuserObject_st* obj) {
  std::lock_guard<std::mutex> lock(g_user_objects_mu);
  return Live().count(obj) != 0;
}

void RetainUserObject(CUuserObject_st* obj, unsigned count) { obj->refs.fetch_add(count); }

void ReleaseUserObject(CUuserObject_st* obj, unsigned count) {
  if (obj->refs.fetch_sub(count) - static_cast<long long>(count) > 0) return;
  {
    std::lock_guard<std::mutex> lock(g_user_objects_mu);
    Live().erase(obj);
  }
  // CUDA runs the destructor on an internal thread, later: so does phos.
  std::thread([fn = obj->destroy, ptr = obj->ptr] { fn(ptr); }).detach();
  delete obj;
}

UserObjectRefs& UserObjectRefs::operator=(const UserObjectRefs& other) {
  if (this != &other) {
    ReleaseAll();
    Merge(other);
  }
  return *this;
}

bool UserObjectRefs::Release(CUuserObject_st* obj, unsigned count) {
  auto it = refs_.find(obj);
  if (it == refs_.end() || it->second < count) return false;
  if ((it->second -= count) == 0) refs_.erase(it);
  ReleaseUserObject(obj, count);
  return true;
}

void UserObjectRefs::Merge(const UserObjectRefs& other) {
  for (const auto& [obj, count] : other.refs_) {
    RetainUserObject(obj, count);
    refs_[obj] += count;
  }
}

void UserObjectRefs::ReleaseAll() {
  for (const auto& [obj, count] : refs_) ReleaseUserObject(obj, count);
  refs_.clear();
}

}  // namespace phos::client

using namespace phos::client;  // NOLINT

PHOS_EXPORT cudaError_t cudaUserObjectCreate(cudaUserObject_t* obj, void* ptr, cudaHostFn_t destroy,
                                             unsigned int initialRefcount, unsigned int flags) {
  return Create(obj, ptr, destroy, initialRefcount, flags);
}
PHOS_EXPORT cudaError_t cudaUserObjectRetain(cudaUserObject_t obj, unsigned int count) {
  return RetainChecked(obj, count);
}
PHOS_EXPORT cudaError_t cudaUserObjectRelease(cudaUserObject_t obj, unsigned int count) {
  return ReleaseChecked(obj, count);
}
PHOS_EXPORT CUresult cuUserObjectCreate(CUuserObject* obj, void* ptr, CUhostFn destroy, unsigned int initialRefcount,
                                        unsigned int flags) {
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  return ToCu(Create(obj, ptr, destroy, initialRefcount, flags));
}
PHOS_EXPORT CUresult cuUserObjectRetain(CUuserObject obj, unsigned int count) {
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  return ToCu(RetainChecked(obj, count));
}
PHOS_EXPORT CUresult cuUserObjectRelease(CUuserObject obj, unsigned int count) {
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  return ToCu(ReleaseChecked(obj, count));
}
